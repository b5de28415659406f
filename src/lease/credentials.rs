//! Lease-bound S3 credentials, for clients that cannot send a header (`aws s3 cp`, rclone,
//! Spark): an access key and secret tied to one lease and its token. Every write the gateway
//! receives signed with them carries that token implicitly. They outlive the lease by a grace
//! period (so a write in flight is judged by the fence, not refused by the clock), and are then
//! rejected outright. They are kept in memory: a restart revokes them all.

use parking_lot::RwLock;
use serde::Serialize;
use std::collections::HashMap;
use std::time::Duration;
use tokio::time::Instant;

/// Credentials as handed to the lease holder.
#[derive(Debug, Clone, Serialize, serde::Deserialize)]
pub struct LeaseCredential {
    pub access_key_id: String,
    pub secret_access_key: String,
    /// The bucket they reach: the lease's bound bucket. They change only objects in the
    /// lease's scope.
    pub bucket: String,
    pub scope: String,
}

#[derive(Clone)]
struct Entry {
    secret: String,
    lease: String,
    token: u64,
    bucket: String,
    scope: String,
    owner: String,
    /// Who held the lease when the credential was issued.
    holder: String,
    /// When the lease ends: its expiry, moved by renewals, or the moment it was released or
    /// replaced. The key works until `until + grace`.
    until: Instant,
}

/// A lease credential that still works after its grant ended (expired, released, replaced),
/// as the admin's lease list shows it: never its secret.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct CredentialInGrace {
    pub access_key_id: String,
    pub lease: String,
    pub token: u64,
    pub holder: String,
    /// When it stops working (Unix ms).
    pub works_until_ms: u64,
}

/// What a request signed with lease credentials is allowed and carries.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaseIdentity {
    pub lease: String,
    pub token: u64,
    pub bucket: String,
    pub scope: String,
    /// The principal that acquired the lease: what the credentials' uploads count against.
    pub owner: String,
}

pub struct LeaseCredentials {
    grace: Duration,
    by_key: RwLock<HashMap<String, Entry>>,
}

fn random_string(len: usize, alphabet: &[u8]) -> String {
    (0..len)
        .map(|_| alphabet[rand::random_range(0..alphabet.len())] as char)
        .collect()
}

impl LeaseCredentials {
    pub fn new(grace: Duration) -> LeaseCredentials {
        LeaseCredentials {
            grace,
            by_key: RwLock::new(HashMap::new()),
        }
    }

    pub fn issue(
        &self,
        lease: &str,
        token: u64,
        bucket: String,
        scope: String,
        (until, owner, holder): (Instant, &str, &str),
    ) -> LeaseCredential {
        let id = format!(
            "FGL{}",
            random_string(17, b"ABCDEFGHIJKLMNOPQRSTUVWXYZ234567")
        );
        let secret = random_string(
            40,
            b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789",
        );
        self.prune();
        let mut map = self.by_key.write();
        map.insert(
            id.clone(),
            Entry {
                secret: secret.clone(),
                lease: lease.to_string(),
                token,
                bucket: bucket.clone(),
                scope: scope.clone(),
                owner: owner.to_string(),
                holder: holder.to_string(),
                until,
            },
        );
        LeaseCredential {
            access_key_id: id,
            secret_access_key: secret,
            bucket,
            scope,
        }
    }

    /// Forgets credentials whose grace is over, so the table does not grow.
    pub fn prune(&self) {
        let now = Instant::now();
        self.by_key
            .write()
            .retain(|_, e| e.until + self.grace >= now);
    }

    /// The lease `lease` with `token` now ends at `until` (renewed, or ended now).
    pub fn set_until(&self, lease: &str, token: u64, until: Instant) {
        for e in self.by_key.write().values_mut() {
            if e.lease == lease && e.token == token {
                e.until = until;
            }
        }
    }

    /// The lease `lease` with `token` ended now (released, or a new grant replaced it).
    pub fn end(&self, lease: &str, token: u64) {
        let now = Instant::now();
        for e in self.by_key.write().values_mut() {
            if e.lease == lease && e.token == token && e.until > now {
                e.until = now;
            }
        }
    }

    /// The secret of a live key, for SigV4; None once its grace is over.
    /// Forgets every credential of `lease`, whichever grant issued it and grace included: an
    /// admin revoked the lease. Returns how many there were.
    pub fn revoke(&self, lease: &str) -> usize {
        let mut map = self.by_key.write();
        let before = map.len();
        map.retain(|_, e| e.lease != lease);
        before - map.len()
    }

    /// Every credential whose own grant has ended but which still works, in its grace: also
    /// when the lease's name is held again, by another holder or grant.
    pub fn in_grace(&self) -> Vec<CredentialInGrace> {
        let now = Instant::now();
        let wall = crate::wall_clock::now_ms();
        let mut listed: Vec<CredentialInGrace> = self
            .by_key
            .read()
            .iter()
            .filter(|(_, e)| e.until <= now && now <= e.until + self.grace)
            .map(|(id, e)| CredentialInGrace {
                access_key_id: id.clone(),
                lease: e.lease.clone(),
                token: e.token,
                holder: e.holder.clone(),
                works_until_ms: wall + (e.until + self.grace - now).as_millis() as u64,
            })
            .collect();
        listed.sort_by(|a, b| (&a.lease, a.token).cmp(&(&b.lease, b.token)));
        listed
    }

    pub fn secret(&self, access_key: &str) -> Option<String> {
        let map = self.by_key.read();
        let e = map.get(access_key)?;
        (Instant::now() <= e.until + self.grace).then(|| e.secret.clone())
    }

    /// What a request signed with `access_key` carries, if it is a lease credential.
    pub fn identity(&self, access_key: &str) -> Option<LeaseIdentity> {
        let map = self.by_key.read();
        map.get(access_key).map(|e| LeaseIdentity {
            lease: e.lease.clone(),
            token: e.token,
            bucket: e.bucket.clone(),
            scope: e.scope.clone(),
            owner: e.owner.clone(),
        })
    }
}
