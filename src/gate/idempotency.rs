//! Idempotent retries (docs/design.md, "Idempotent retries"): a write or delete sent with an
//! `Idempotency-Key` is carried out once, and a retry with the same key, on any instance, gets
//! the first answer again. Each completed multipart upload is idempotent the same way, keyed by
//! its upload id, as on S3.
//!
//! The answer lives on the object's own row, so that it is claimed and recorded in the same
//! atomic put as the commit it describes, with no second table to keep in step:
//! - the intent carries the answer the commit will give ([`Pending::answer`]), synced before
//!   the store changes. A retry after a crash or on another instance finds it, and the store
//!   says whether the commit landed (its version is there): then the answer is replayed, and
//!   nothing is written again;
//! - once the commit's outcome is recorded, the answer moves to the row's answered requests
//!   ([`FenceRow::answered`]) until it expires;
//! - the same key asking something else (another body, token or object) is refused with 422;
//!   a retry while the first request's commit is still in progress on another instance gets
//!   409, and so does one on this instance while the first is still being received.

use super::intents::pending_landed;
use super::{Gate, GateError, WriteRequest, Written};
use crate::backend::{BodyError, ByteStream};
use crate::fence::{Answered, FenceRow, Pending};
use futures::StreamExt;
use sha2::{Digest, Sha256};
use std::sync::Arc;
use std::time::Duration;

/// How long an answer is kept by default (Stripe keeps keys for 24 hours).
pub const DEFAULT_TTL: Duration = Duration::from_secs(24 * 3600);

/// Answers kept per object at most: the oldest goes first. A retry of an answer dropped
/// early is carried out again (docs/design.md).
const MAX_ANSWERS_PER_OBJECT: usize = 32;

/// Longest key accepted (Stripe's limit).
const MAX_KEY_LEN: usize = 255;

/// An idempotent request: who sent which key, and what it asks.
#[derive(Debug, Clone)]
pub struct Idempotency {
    /// SHA-256 (hex) of the principal and the key: keys of different principals never meet,
    /// and the fence table never holds a client's key itself.
    pub id: String,
    /// SHA-256 (hex) of what the request asks, set by the gate once it is known (a body's
    /// digest is known only when the body has been read).
    pub fingerprint: String,
}

impl Idempotency {
    /// From an `Idempotency-Key` header: a string of 1 to 255 visible ASCII characters, bare
    /// (as Stripe takes it) or as the IETF draft's quoted structured-field string.
    pub fn from_header(principal: &str, value: &[u8]) -> Result<Idempotency, GateError> {
        let value = match value {
            [b'"', inner @ .., b'"'] => inner,
            other => other,
        };
        let printable = value
            .iter()
            .all(|b| (0x21..=0x7e).contains(b) && *b != b'"');
        if value.is_empty() || value.len() > MAX_KEY_LEN || !printable {
            return Err(GateError::InvalidIdempotencyKey(format!(
                "the key must be 1 to {MAX_KEY_LEN} visible ASCII characters without quotes or spaces (a UUID is a good key), got {} bytes",
                value.len()
            )));
        }
        Ok(Idempotency {
            id: digest_of(&[b"key", principal.as_bytes(), value]),
            fingerprint: String::new(),
        })
    }

    /// The implicit key of a multipart upload's completion: its upload id, whoever sends it.
    pub(super) fn upload(upload_id: &str) -> Idempotency {
        Idempotency {
            id: digest_of(&[b"upload", upload_id.as_bytes()]),
            fingerprint: String::new(),
        }
    }
}

fn digest_of(parts: &[&[u8]]) -> String {
    let mut h = Sha256::new();
    for p in parts {
        // Length-prefixed, so that no two different part lists hash alike.
        h.update((p.len() as u64).to_be_bytes());
        h.update(p);
    }
    hex::encode(h.finalize())
}

/// What a request asks, for comparing a retry with the first request.
pub(super) fn fingerprint(
    op: &str,
    bucket: &str,
    key: &str,
    token: Option<u64>,
    content: &[u8],
) -> String {
    let token = token.map(|t| t.to_string()).unwrap_or_default();
    digest_of(&[
        op.as_bytes(),
        bucket.as_bytes(),
        key.as_bytes(),
        token.as_bytes(),
        content,
    ])
}

/// Hashes a body as it streams past, for the fingerprint of an idempotent write.
pub(super) struct BodyDigest(Arc<parking_lot::Mutex<Sha256>>);

impl BodyDigest {
    pub fn wrap(body: ByteStream) -> (ByteStream, BodyDigest) {
        let hasher = Arc::new(parking_lot::Mutex::new(Sha256::new()));
        let h = Arc::clone(&hasher);
        let body = body
            .map(move |chunk| {
                if let Ok(bytes) = &chunk {
                    h.lock().update(bytes);
                }
                chunk
            })
            .boxed();
        (body, BodyDigest(hasher))
    }

    /// The digest of everything that passed: call it once the body was read to its end.
    pub fn finish(self) -> Vec<u8> {
        self.0.lock().clone().finalize().to_vec()
    }
}

/// Reads a body to its end for its digest only (a retry whose answer is replayed).
pub(super) async fn drain(mut body: ByteStream) -> Result<Vec<u8>, BodyError> {
    let mut h = Sha256::new();
    while let Some(chunk) = body.next().await {
        h.update(chunk?);
    }
    Ok(h.finalize().to_vec())
}

/// Keeps `answer` on the row, dropping expired answers and, past the limit, the oldest.
pub(super) fn remember(row: &mut FenceRow, (id, answer): (String, Answered)) {
    let now = crate::wall_clock::now_ms();
    row.answered.retain(|_, a| a.expires_at_ms > now);
    row.answered.insert(id, answer);
    while row.answered.len() > MAX_ANSWERS_PER_OBJECT {
        let oldest = row
            .answered
            .iter()
            .min_by_key(|(_, a)| a.expires_at_ms)
            .map(|(id, _)| id.clone());
        match oldest {
            Some(id) => row.answered.remove(&id),
            None => break,
        };
    }
}

/// A pending commit that landed without its outcome being recorded (a crash, or an instance
/// that died before answering): its answer is kept before another commit replaces the intent.
pub(super) fn keep_landed_answer(row: &mut FenceRow, found: Option<&str>) {
    if !pending_landed(row, found) {
        return;
    }
    if let Some(answer) = row.pending.as_mut().and_then(|p| p.answer.take()) {
        remember(row, answer);
    }
}

/// A pending commit or delete that landed becomes the row's committed state, its answer kept:
/// what recording its outcome would have written.
pub(super) fn fold_landed(row: &mut FenceRow) {
    let Some(mut pending) = row.pending.take() else {
        return;
    };
    if let Some(answer) = pending.answer.take() {
        remember(row, answer);
    }
    row.version = pending.version;
    row.etag = pending.etag;
    row.tombstone = row.version.is_none();
    row.unresolved_until_ms = None;
}

/// Once a commit's outcome is recorded: its pending answer, with the store's ETag, is kept.
pub(super) fn settle(row: &mut FenceRow, pending: Option<Pending>, etag: Option<&str>) {
    if let Some((id, mut answer)) = pending.and_then(|p| p.answer) {
        if etag.is_some() {
            answer.etag = etag.map(str::to_string);
        }
        remember(row, (id, answer));
    }
}

impl Gate {
    /// What a put asks: its object, scope (the lock, in a header-scoped bucket), token, body,
    /// metadata and conditions, so that a retry differing in any of them is not answered as the
    /// first (pinned by `the_lock_metadata_and_conditions_are_part_of_the_request`).
    pub(super) fn fingerprint_put(&self, req: &mut WriteRequest, scope: &str, body_digest: &[u8]) {
        let mut content = body_digest.to_vec();
        content.extend_from_slice(
            format!("\0{scope}\0{:?}\0{:?}", req.meta, req.conditions).as_bytes(),
        );
        let fingerprint = fingerprint("put", &req.bucket, &req.key, req.meta.token, &content);
        if let Some(idem) = &mut req.idempotency {
            idem.fingerprint = fingerprint;
        }
    }

    /// The answer an idempotent request will give if its commit or delete lands.
    pub(super) fn answer_for(
        &self,
        req: &WriteRequest,
        token: Option<u64>,
        (etag, size, existed): (Option<String>, u64, Option<bool>),
    ) -> Option<(String, Answered)> {
        let idem = req.idempotency.as_ref()?;
        let expires_at_ms =
            crate::wall_clock::now_ms().saturating_add(self.idempotency_ttl.as_millis() as u64);
        Some((
            idem.id.clone(),
            Answered {
                fingerprint: idem.fingerprint.clone(),
                token,
                etag,
                size,
                existed,
                expires_at_ms,
            },
        ))
    }

    /// A live answer recorded for this request's key on `row`, if any (no store round trip).
    pub(super) fn recorded<'r>(req: &WriteRequest, row: &'r FenceRow) -> Option<&'r Answered> {
        Self::recorded_for(req.idempotency.as_ref(), row)
    }

    pub(super) fn recorded_for<'r>(
        idem: Option<&Idempotency>,
        row: &'r FenceRow,
    ) -> Option<&'r Answered> {
        let idem = idem?;
        let now = crate::wall_clock::now_ms();
        row.answered.get(&idem.id).filter(|a| a.expires_at_ms > now)
    }

    /// Whether `row`'s intent carries an answer for this request's key.
    pub(super) fn pending_answer(req: &WriteRequest, row: &FenceRow) -> bool {
        Self::pending_for(req.idempotency.as_ref(), row)
    }

    pub(super) fn pending_for(idem: Option<&Idempotency>, row: &FenceRow) -> bool {
        let Some(idem) = idem else {
            return false;
        };
        row.pending
            .as_ref()
            .and_then(|p| p.answer.as_ref())
            .is_some_and(|(id, _)| *id == idem.id)
    }

    /// Under the scope's lock, on the object's row this decision builds on: the first answer
    /// to this request's key, to be replayed (the same request) or refused (422, another
    /// request under the same key). `None`: the key is new here, or its first request did not
    /// land, so this request is carried out. A first request whose commit is still in progress
    /// on another instance gets 409.
    pub(super) async fn answered_before(
        &self,
        entry: &super::BucketEntry,
        req: &WriteRequest,
        scope: &str,
        row: &FenceRow,
    ) -> Result<Option<Written>, GateError> {
        let Some(idem) = &req.idempotency else {
            return Ok(None);
        };
        let answer = if let Some(a) = Self::recorded(req, row) {
            a.clone()
        } else {
            let pending = row
                .pending
                .as_ref()
                .and_then(|p| p.answer.as_ref())
                .filter(|(id, _)| *id == idem.id);
            let Some((_, a)) = pending else {
                return Ok(None);
            };
            let found = entry.backend.version(&req.bucket, &req.key).await?;
            if !pending_landed(row, found.as_deref()) {
                let now = crate::wall_clock::now_ms();
                let live = row.unresolved_until_ms.is_some_and(|u| u > now);
                if self.intents.is_some() && live {
                    return Err(GateError::IdempotencyKeyInUse(format!(
                        "a request with this Idempotency-Key is being committed through another instance; retry in {} s to get its answer",
                        (row.unresolved_until_ms.unwrap_or(now) - now).div_ceil(1000).max(1)
                    )));
                }
                // The first request may still land (its answer was lost, or its process died),
                // or has ended by a clock that must be trusted: that is said before the token is
                // judged, since a token it spent would refuse the retry as stale.
                self.still_unresolved(entry, &req.bucket, &req.key, row)
                    .await?;
                return Ok(None);
            }
            a.clone()
        };
        if answer.fingerprint != idem.fingerprint {
            return Err(GateError::IdempotencyKeyMismatch(
                "this Idempotency-Key was first used for a different request (another body, token or object); use a new key for a new request".into(),
            ));
        }
        crate::metrics::idempotent_replay(&req.bucket);
        tracing::info!(bucket = %req.bucket, key = %req.key, "replaying the answer of an earlier request with the same Idempotency-Key");
        Ok(Some(Written {
            bucket: req.bucket.clone(),
            key: req.key.clone(),
            scope: scope.to_string(),
            token: answer.token,
            etag: answer.etag,
            size: answer.size,
            existed: answer.existed,
            replayed: true,
        }))
    }

    /// Claims `id` for a request being received on this instance: a second request with the
    /// same key meanwhile gets 409 (the IETF draft's answer for a request still in progress).
    pub(super) fn claim_key(
        self: &Arc<Self>,
        req: &WriteRequest,
    ) -> Result<Option<KeyClaim>, GateError> {
        let Some(idem) = &req.idempotency else {
            return Ok(None);
        };
        if !self.idempotency_claims.lock().insert(idem.id.clone()) {
            return Err(GateError::IdempotencyKeyInUse(
                "a request with this Idempotency-Key is still in progress on this instance; retry when it has answered to get its answer".into(),
            ));
        }
        Ok(Some(KeyClaim {
            gate: Arc::clone(self),
            id: idem.id.clone(),
        }))
    }
}

/// Released when the request that claimed the key ends, or its client hangs up. A commit
/// that outlives its request holds the scope's lock instead, so a retry that arrives then
/// waits for that commit and is answered from it.
pub(super) struct KeyClaim {
    gate: Arc<Gate>,
    id: String,
}

impl Drop for KeyClaim {
    fn drop(&mut self) {
        self.gate.idempotency_claims.lock().remove(&self.id);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_validated_and_scoped_to_their_principal() {
        let a = Idempotency::from_header("key:a", b"4f1c-9").unwrap();
        let quoted = Idempotency::from_header("key:a", b"\"4f1c-9\"").unwrap();
        let b = Idempotency::from_header("key:b", b"4f1c-9").unwrap();
        assert_eq!(a.id, quoted.id);
        assert_ne!(a.id, b.id);
        for bad in [
            &b""[..],
            b"\"\"",
            b"has space",
            b"tab\t",
            &[b'x'; 256],
            b"caf\xc3\xa9",
        ] {
            let e = Idempotency::from_header("key:a", bad).unwrap_err();
            assert_eq!((e.status(), e.code()), (400, "InvalidIdempotencyKey"));
        }
        assert!(Idempotency::from_header("key:a", &[b'x'; 255]).is_ok());
    }

    #[test]
    fn fingerprints_tell_requests_apart() {
        let base = fingerprint("put", "b", "k", Some(7), b"body");
        assert_eq!(base, fingerprint("put", "b", "k", Some(7), b"body"));
        for other in [
            fingerprint("delete", "b", "k", Some(7), b"body"),
            fingerprint("put", "b", "k2", Some(7), b"body"),
            fingerprint("put", "b", "k", Some(8), b"body"),
            fingerprint("put", "b", "k", None, b"body"),
            fingerprint("put", "b", "k", Some(7), b"bodz"),
            fingerprint("put", "bk", "", Some(7), b"body"),
        ] {
            assert_ne!(base, other);
        }
    }

    #[test]
    fn answers_expire_and_are_bounded_per_object() {
        let mut row = FenceRow::default();
        let now = crate::wall_clock::now_ms();
        let answer = |x| Answered {
            fingerprint: "f".into(),
            expires_at_ms: x,
            ..Answered::default()
        };
        row.answered.insert("expired".into(), answer(now - 1));
        for i in 0..40 {
            remember(&mut row, (format!("k{i}"), answer(now + 1000 + i)));
        }
        assert_eq!(row.answered.len(), MAX_ANSWERS_PER_OBJECT);
        assert!(!row.answered.contains_key("expired"));
        assert!(!row.answered.contains_key("k0"), "the oldest goes first");
        assert!(row.answered.contains_key("k39"));
    }
}
