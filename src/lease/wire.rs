//! What the lease service takes and answers: an acquire request, a grant as a client sees it,
//! and the admin's listing and revoke, serialized by the surfaces and read back by the admin
//! command line.

use super::LeaseCredential;
use serde::Serialize;
use std::time::Duration;

/// What to fence with a lease: every grant advances this scope.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct Binding {
    pub bucket: String,
    pub key: String,
}

/// One acquire request.
#[derive(Debug, Clone)]
pub struct AcquireRequest {
    pub name: String,
    pub holder: String,
    pub ttl: Duration,
    /// How long to wait for a held lease to free up (zero: answer at once).
    pub wait: Duration,
    pub bind: Option<Binding>,
    /// Also issue S3 credentials that carry the token implicitly (bound leases only).
    pub s3_credentials: bool,
    /// Who asks (the authenticated principal): a live lease is re-granted to the same holder
    /// only when the same principal asks.
    pub owner: String,
}

/// A lease as a client sees it.
#[derive(Debug, Clone, Serialize, serde::Deserialize)]
pub struct Grant {
    pub name: String,
    pub holder: String,
    pub token: u64,
    pub ttl_ms: u64,
    /// Wall-clock expiry (Unix ms), for display; the server judges expiry monotonically.
    pub expires_at_ms: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bound: Option<Binding>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scope: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub s3_credentials: Option<LeaseCredential>,
    /// The proof renew and release ask for; shown once, in the acquire's answer.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lease_secret: Option<String>,
}

/// What an admin's revoke ended: the live lease, if any, and how many credentials.
#[derive(Debug, Clone, Serialize, serde::Deserialize)]
pub struct Revoked {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lease: Option<Grant>,
    pub credentials: usize,
}

/// `GET /admin/leases`: every lease held, with the principal that acquired it, and the lease
/// S3 credentials still working in their grace period.
#[derive(Debug, Clone, Serialize, serde::Deserialize)]
pub struct LeaseListing {
    pub leases: Vec<ListedLease>,
    pub credentials_in_grace: Vec<super::CredentialInGrace>,
}

/// `GET /admin/leases/{name}`: the live lease of that name, if any, and the S3 credentials its
/// earlier grants issued that still work.
#[derive(Debug, Clone, Serialize, serde::Deserialize)]
pub struct LeaseShown {
    pub lease: Option<ListedLease>,
    pub credentials_in_grace: Vec<super::CredentialInGrace>,
}

/// One lease of a [`LeaseListing`].
#[derive(Debug, Clone, Serialize, serde::Deserialize)]
pub struct ListedLease {
    #[serde(flatten)]
    pub grant: Grant,
    pub principal: String,
}

/// A grant as shown to anyone but its holder at acquire: the secrets were shown once.
pub(super) fn public(grant: &Grant) -> Grant {
    let mut g = grant.clone();
    g.lease_secret = None;
    g.s3_credentials = g.s3_credentials.map(|c| LeaseCredential {
        secret_access_key: "<hidden>".into(),
        ..c
    });
    g
}
