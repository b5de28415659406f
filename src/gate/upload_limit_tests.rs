//! The bounds on open multipart uploads (`UploadLimits`) on a shared fence table: two gates
//! (two instances) over one in-memory table that keeps records as etcd does, creating at once,
//! make no more uploads together than the bounds allow, and an upload completed, aborted or
//! expired through either gives its place back to both.

use super::test_kit::{body, req};
use super::*;
use crate::backend::scripted::{Script, Scripted};
use crate::backend::{Backend, BackendError};
use crate::config::BucketPolicy;
use crate::fence::memory::MemoryFenceStore;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

/// A store whose CreateMultipartUpload takes a while, so creates through both gates overlap,
/// and that counts the uploads it made and dropped.
#[derive(Default)]
struct Counting {
    created: AtomicUsize,
    dropped: AtomicUsize,
}

#[async_trait::async_trait]
impl Script for Counting {
    async fn create_upload(
        &self,
        inner: &Arc<dyn Backend>,
        bucket: &str,
        key: &str,
        meta: &crate::backend::ObjectMeta,
    ) -> Result<String, BackendError> {
        tokio::time::sleep(Duration::from_millis(20)).await;
        self.created.fetch_add(1, Ordering::SeqCst);
        inner.create_upload(bucket, key, meta).await
    }

    async fn finish_upload(
        &self,
        inner: &Arc<dyn Backend>,
        bucket: &str,
        key: &str,
        handle: &str,
    ) -> Result<(), BackendError> {
        self.dropped.fetch_add(1, Ordering::SeqCst);
        inner.finish_upload(bucket, key, handle).await
    }
}

/// Two gates over one shared table and one store (an fs directory stands in for the s3 store
/// both instances reach), with buckets `b` and `c`.
fn two(limits: UploadLimits) -> ([Arc<Gate>; 2], Arc<Scripted<Counting>>, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let fs = crate::backend::fs::FsBackend::open(dir.path(), &["b", "c"]).unwrap();
    let backend = Arc::new(Scripted::new(Arc::new(fs), Counting::default()));
    let table = Arc::new(MemoryFenceStore::new_shared());
    let gate = || {
        let mut buckets = BTreeMap::new();
        for b in ["b", "c"] {
            buckets.insert(
                b.to_string(),
                BucketEntry::new(BucketPolicy::default(), backend.clone()),
            );
        }
        Arc::new(
            Gate::new(table.clone(), buckets)
                .with_upload_limits(limits)
                .with_uploads(UploadRegistry::shared(table.clone())),
        )
    };
    ([gate(), gate()], backend, dir)
}

/// `n` creates at once by `owner` in `bucket`, alternating between the gates: how many
/// passed. Every other answer must be 400 `TooManyUploads` naming `setting`.
async fn at_once(
    gates: &[Arc<Gate>; 2],
    n: usize,
    bucket: &str,
    owner: &str,
    setting: &str,
) -> usize {
    let creates: Vec<_> = (0..n)
        .map(|i| {
            let gate = gates[i % 2].clone();
            let (bucket, owner) = (bucket.to_string(), owner.to_string());
            tokio::spawn(async move {
                let mut r = req(&format!("{owner}-{i}"), Some(1));
                r.bucket = bucket;
                gate.create_upload(r, &owner).await
            })
        })
        .collect();
    let mut passed = 0;
    for c in creates {
        match c.await.unwrap() {
            Ok(_) => passed += 1,
            Err(e) => {
                assert_eq!((e.status(), e.code()), (400, "TooManyUploads"), "{e}");
                assert!(e.to_string().contains(setting), "{e}");
            }
        }
    }
    passed
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn creates_through_two_gates_stop_at_the_key_bound() {
    let (gates, store, _dir) = two(UploadLimits {
        per_key: 5,
        ..UploadLimits::default()
    });
    assert_eq!(
        at_once(&gates, 20, "b", "alice", "max_uploads_per_key").await,
        5
    );
    assert_eq!(gates[1].uploads("b", "").await.unwrap().len(), 5);
    // The uploads the store made for the creates refused at their record are dropped.
    let counts = &store.script;
    assert_eq!(
        counts.created.load(Ordering::SeqCst) - counts.dropped.load(Ordering::SeqCst),
        5
    );
    // The key's bound holds in every bucket.
    assert_eq!(
        at_once(&gates, 2, "c", "alice", "max_uploads_per_key").await,
        0
    );

    // An abort through one gate frees a place for the other.
    let open = gates[0].uploads("b", "").await.unwrap();
    gates[0]
        .abort_upload(
            "b",
            &open[0].key,
            &open[0].id,
            Ok(Some(crate::token::Token(1))),
        )
        .await
        .unwrap();
    assert_eq!(
        at_once(&gates, 4, "c", "alice", "max_uploads_per_key").await,
        1
    );

    // So does a completion.
    let up = &open[1];
    let part = gates[1]
        .upload_part(
            "b",
            &up.key,
            &up.id,
            1,
            Ok(Some(crate::token::Token(1))),
            body("x"),
            Some(1),
            || None,
        )
        .await
        .unwrap();
    gates[0]
        .complete_upload(req(&up.key, 1), &up.id, &[(1, part.etag)], "")
        .await
        .unwrap();
    assert_eq!(
        at_once(&gates, 4, "b", "alice", "max_uploads_per_key").await,
        1
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn creates_through_two_gates_stop_at_the_bucket_bound_and_expiry_frees_it() {
    let (gates, _store, _dir) = two(UploadLimits {
        per_bucket: 5,
        expiry: Duration::from_millis(300),
        ..UploadLimits::default()
    });
    assert_eq!(at_once(&gates, 2, "b", "alice", "-").await, 2);
    assert_eq!(
        at_once(&gates, 20, "b", "bob", "max_uploads_per_bucket").await,
        3
    );
    // Another bucket has room of its own.
    assert_eq!(at_once(&gates, 2, "c", "bob", "-").await, 2);
    tokio::time::sleep(Duration::from_millis(400)).await;
    assert_eq!(gates[0].expire_uploads().await, 7);
    assert_eq!(
        at_once(&gates, 20, "b", "carol", "max_uploads_per_bucket").await,
        5
    );
}
