//! The claim a fence table holds on a store place: one object, `<prefix>.fencegate-probe/claim`,
//! in the probes' reserved space (fencegate refuses client keys there and hides them from
//! listings), naming the id of the fence table that fences the place and the fencegate bucket
//! served from it. Two fence tables on one place would each decide conditions and tokens alone,
//! and so would two buckets of one table (their rows are apart); the claim lets the second
//! refuse to start (`catalog::claim`).

use super::errors::{classify, S3Failure};
use super::S3Backend;
use aws_sdk_s3::primitives::ByteStream;

pub use crate::backend::claim::{Claim, ClaimStore, CLAIM_NAME};

impl S3Backend {
    /// The claim's key in the store.
    pub fn claim_key(&self) -> String {
        format!("{}{}{CLAIM_NAME}", self.prefix, super::scratch::SCRATCH)
    }

    /// The claim on this place, if any. An object there that is not a claim is reported as
    /// an error: it was not written by fencegate, and nothing can be concluded from it.
    pub async fn read_claim(&self) -> Result<Option<Claim>, String> {
        let key = self.claim_key();
        let out = match self
            .clients
            .reads
            .get_object()
            .bucket(&self.bucket)
            .key(&key)
            .send()
            .await
        {
            Ok(out) => out,
            Err(e) => {
                return match classify("GetObject", e) {
                    S3Failure::NotFound => Ok(None),
                    other => Err(format!(
                        "cannot read the claim {key}: {}",
                        other.into_backend("GetObject")
                    )),
                }
            }
        };
        let bytes = out
            .body
            .collect()
            .await
            .map_err(|e| format!("cannot read the claim {key}: {e}"))?
            .into_bytes();
        serde_json::from_slice(&bytes).map(Some).map_err(|e| {
            format!("the object {key} in store bucket {} is not a fencegate claim ({e}); remove it (fencegate reserves .fencegate-probe/ for itself) and start again", self.bucket)
        })
    }

    /// Writes `claim` if the place has none (`If-None-Match: *`), or whatever is there when
    /// `replace`: false when the store says one is there already. A store that ignores the
    /// condition overwrites; the caller reads the claim back either way.
    pub async fn write_claim(&self, claim: &Claim, replace: bool) -> Result<bool, String> {
        let key = self.claim_key();
        let body = serde_json::to_vec_pretty(claim).expect("a claim always serializes");
        match self
            .clients
            .writes
            .put_object()
            .bucket(&self.bucket)
            .key(&key)
            .content_type("application/json")
            .set_if_none_match((!replace).then(|| "*".to_string()))
            .body(ByteStream::from(body))
            .send()
            .await
        {
            Ok(_) => Ok(true),
            // AWS answers a create racing another with 409 ConditionalRequestConflict: the
            // other's claim is there (or about to be), and is read back as any other.
            Err(e) if e.raw_response().map(|r| r.status().as_u16()) == Some(409) => Ok(false),
            Err(e) => match classify("PutObject", e) {
                S3Failure::Precondition => Ok(false),
                other => Err(format!(
                    "cannot write the claim {key}: {}",
                    other.into_backend("PutObject")
                )),
            },
        }
    }
}

#[async_trait::async_trait]
impl ClaimStore for S3Backend {
    fn claim_key(&self) -> String {
        S3Backend::claim_key(self)
    }

    fn store_bucket(&self) -> &str {
        S3Backend::store_bucket(self)
    }

    async fn read_claim(&self) -> Result<Option<Claim>, String> {
        S3Backend::read_claim(self).await
    }

    async fn write_claim(&self, claim: &Claim, replace: bool) -> Result<bool, String> {
        S3Backend::write_claim(self, claim, replace).await
    }
}
