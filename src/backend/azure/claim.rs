//! The store place's claim (`backend::claim`) as a blob, written with `If-None-Match: *`.

use super::client::Request;
use super::errors::AzFailure;
use super::AzureBackend;
use crate::backend::claim::{Claim, ClaimStore, CLAIM_NAME};
use reqwest::Method;

#[async_trait::async_trait]
impl ClaimStore for AzureBackend {
    fn claim_key(&self) -> String {
        format!("{}.fencegate-probe/{CLAIM_NAME}", self.prefix)
    }

    fn store_bucket(&self) -> &str {
        &self.container
    }

    async fn read_claim(&self) -> Result<Option<Claim>, String> {
        let key = self.claim_key();
        let req = || Request::new(Method::GET, &self.container, &key);
        let bytes = match self.client.read("Get Blob", req).await {
            Ok(r) => r
                .bytes()
                .await
                .map_err(|e| format!("cannot read the claim {key}: {e}"))?,
            Err(AzFailure::NotFound) => return Ok(None),
            Err(f) => {
                return Err(format!(
                    "cannot read the claim {key}: {}",
                    f.into_backend("Get Blob")
                ))
            }
        };
        serde_json::from_slice(&bytes).map(Some).map_err(|e| {
            format!("the blob {key} in container {} is not a fencegate claim ({e}); remove it (fencegate reserves .fencegate-probe/ for itself) and start again", self.container)
        })
    }

    async fn write_claim(&self, claim: &Claim, replace: bool) -> Result<bool, String> {
        let key = self.claim_key();
        let body = serde_json::to_vec_pretty(claim).expect("a claim always serializes");
        let mut req = Request::new(Method::PUT, &self.container, &key)
            .header("x-ms-blob-type", "BlockBlob")
            .header("content-type", "application/json")
            .body(bytes::Bytes::from(body).into());
        if !replace {
            req = req.header("if-none-match", "*");
        }
        match self.client.send("Put Blob", req).await {
            Ok(_) => Ok(true),
            Err(AzFailure::Precondition) => Ok(false),
            Err(f) => Err(format!(
                "cannot write the claim {key}: {}",
                f.into_backend("Put Blob")
            )),
        }
    }
}
