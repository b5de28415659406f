//! The store place's claim (`backend::claim`) as an object, written with
//! `x-goog-if-generation-match: 0` unless it is replaced.

use super::client::Request;
use super::errors::GcsFailure;
use super::GcsBackend;
use crate::backend::claim::{Claim, ClaimStore, CLAIM_NAME};
use reqwest::Method;

#[async_trait::async_trait]
impl ClaimStore for GcsBackend {
    fn claim_key(&self) -> String {
        format!("{}.fencegate-probe/{CLAIM_NAME}", self.prefix)
    }

    fn store_bucket(&self) -> &str {
        &self.bucket
    }

    async fn read_claim(&self) -> Result<Option<Claim>, String> {
        let key = self.claim_key();
        let req = || Request::xml(Method::GET, &self.bucket, &key);
        let bytes = match self.client.read("GET Object", req).await {
            Ok(r) => r
                .bytes()
                .await
                .map_err(|e| format!("cannot read the claim {key}: {e}"))?,
            Err(GcsFailure::NotFound) => return Ok(None),
            Err(f) => {
                return Err(format!(
                    "cannot read the claim {key}: {}",
                    f.into_backend("GET Object")
                ))
            }
        };
        serde_json::from_slice(&bytes).map(Some).map_err(|e| {
            format!("the object {key} in bucket {} is not a fencegate claim ({e}); remove it (fencegate reserves .fencegate-probe/ for itself) and start again", self.bucket)
        })
    }

    async fn write_claim(&self, claim: &Claim, replace: bool) -> Result<bool, String> {
        let key = self.claim_key();
        let body = serde_json::to_vec_pretty(claim).expect("a claim always serializes");
        let mut req = Request::xml(Method::PUT, &self.bucket, &key)
            .header("content-type", "application/json")
            .body(bytes::Bytes::from(body).into());
        if !replace {
            req = req.header("x-goog-if-generation-match", "0");
        }
        match self.client.send("PUT Object", req).await {
            Ok(_) => Ok(true),
            Err(GcsFailure::Precondition) => Ok(false),
            Err(f) => Err(format!(
                "cannot write the claim {key}: {}",
                f.into_backend("PUT Object")
            )),
        }
    }
}
