//! What the gate's unit tests share: a write request, a body, and a gate over the one bucket
//! `b`. The backend doubles are `backend::memory` and `backend::scripted`; the fence-table
//! double is `fence::memory`.

use super::{BucketEntry, Conditions, Gate, WriteRequest};
use crate::backend::{Backend, BodyError, ByteStream, ObjectMeta};
use crate::config::BucketPolicy;
use crate::fence::FenceStore;
use crate::token::Token;
use bytes::Bytes;
use std::collections::BTreeMap;
use std::sync::Arc;

/// A write of `b/key` with `token` (a number, `Some`, or `None` for no token).
pub fn req(key: &str, token: impl Into<Option<u64>>) -> WriteRequest {
    WriteRequest {
        bucket: "b".into(),
        key: key.into(),
        token: Ok(token.into().map(Token)),
        scope_header: None,
        scope_takeover: None,
        conditions: Conditions::default(),
        meta: ObjectMeta::default(),
        idempotency: None,
    }
}

/// A body of `bytes`, in one chunk.
pub fn body(bytes: impl AsRef<[u8]>) -> ByteStream {
    let bytes = Bytes::copy_from_slice(bytes.as_ref());
    Box::pin(futures::stream::once(
        async move { Ok::<_, BodyError>(bytes) },
    ))
}

/// A gate whose one bucket `b` has `policy`, over `backend` and `store`.
pub fn gate_over(
    policy: BucketPolicy,
    backend: Arc<dyn Backend>,
    store: Arc<dyn FenceStore>,
) -> Arc<Gate> {
    let mut buckets = BTreeMap::new();
    buckets.insert("b".to_string(), BucketEntry::new(policy, backend));
    Arc::new(Gate::new(store, buckets))
}
