//! Many concurrent writers with random tokens on one scope, through the real gate, the real
//! RocksDB fence table and the real fs backend. A recording wrapper around the backend logs
//! each commit as it takes effect: the accepted tokens never decrease, and the final object is
//! the last accepted write.

use async_trait::async_trait;
use bytes::Bytes;
use fencegate::backend::fs::FsBackend;
use fencegate::backend::scripted::{Script, Scripted};
use fencegate::backend::{Backend, BackendError, ObjectInfo, ObjectMeta, Staged};
use fencegate::config::BucketPolicy;
use fencegate::fence::rocks::RocksFenceStore;
use fencegate::gate::{BucketEntry, Conditions, Gate, WriteRequest};
use fencegate::token::Token;
use futures::StreamExt;
use parking_lot::Mutex;
use rand::{Rng, SeedableRng};
use std::collections::BTreeMap;
use std::sync::Arc;

/// Records each commit's token as it takes effect.
struct Recording {
    commits: Mutex<Vec<u64>>,
}

#[async_trait]
impl Script for Recording {
    async fn commit(
        &self,
        inner: &Arc<dyn Backend>,
        staged: &Staged,
        expected: Option<&str>,
    ) -> Result<ObjectInfo, BackendError> {
        let info = inner.commit(staged, expected).await?;
        // Called under the scope's lock, so this order is the order commits took effect.
        self.commits.lock().push(info.meta.token.unwrap());
        Ok(info)
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn random_tokens_commit_in_non_decreasing_order() {
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(RocksFenceStore::open(&dir.path().join("fences")).unwrap());
    let fs = Arc::new(FsBackend::open(&dir.path().join("objects"), &["b"]).unwrap());
    let backend = Arc::new(Scripted::new(
        fs,
        Recording {
            commits: Mutex::new(Vec::new()),
        },
    ));
    let mut buckets = BTreeMap::new();
    buckets.insert(
        "b".to_string(),
        BucketEntry::new(BucketPolicy::default(), backend.clone()),
    );
    let gate = Arc::new(Gate::new(store, buckets));

    let seed: u64 = std::env::var("FENCEGATE_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(42);
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let mut tasks = Vec::new();
    for writer in 0..64u64 {
        let tokens: Vec<u64> = (0..8).map(|_| rng.random_range(0..200)).collect();
        let gate = gate.clone();
        tasks.push(tokio::spawn(async move {
            let mut results = Vec::new();
            for token in tokens {
                let payload = format!("writer {writer} token {token}");
                // Two chunks with a yield between them, so uploads overlap.
                let chunks = futures::stream::iter([payload.clone().into_bytes(), b"\n".to_vec()])
                    .then(|c| async move {
                        tokio::task::yield_now().await;
                        Ok(Bytes::from(c))
                    });
                let req = WriteRequest {
                    bucket: "b".into(),
                    key: "hot".into(),
                    token: Ok(Some(Token(token))),
                    scope_header: None,
                    scope_takeover: None,
                    conditions: Conditions::default(),
                    meta: ObjectMeta::default(),
                    idempotency: None,
                };
                let r = gate.put(req, Box::pin(chunks)).await;
                results.push(r.map(|_| ()).map_err(|e| e.code()));
            }
            results
        }));
    }
    let mut acknowledged = 0;
    for t in tasks {
        for result in t.await.unwrap() {
            match result {
                Ok(()) => acknowledged += 1,
                Err("StaleFencingToken") => {}
                Err(other) => panic!("unexpected {other}"),
            }
        }
    }
    let commits = backend.commits.lock().clone();
    assert_eq!(
        commits.len(),
        acknowledged,
        "every acknowledged write took effect, no other did"
    );
    assert!(
        commits.windows(2).all(|w| w[0] <= w[1]),
        "seed {seed}: commit order {commits:?}"
    );
    let (_, mut body) = gate.get("b", "hot").await.unwrap();
    let mut bytes = Vec::new();
    while let Some(c) = body.next().await {
        bytes.extend_from_slice(&c.unwrap());
    }
    let text = String::from_utf8(bytes).unwrap();
    let last = *commits.last().unwrap();
    assert!(
        text.ends_with(&format!("token {last}\n")),
        "seed {seed}: final object {text:?}, last commit {last}"
    );
    let info = gate.fence_info("b", "hot", None).await.unwrap();
    assert_eq!(info.highest, Some(last));
}
