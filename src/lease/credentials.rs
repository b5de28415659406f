//! Lease-bound S3 credentials, for clients that cannot send a header (`aws s3 cp`, rclone,
//! Spark): an access key and secret tied to one lease and its token. Every write the gateway
//! receives signed with them carries that token implicitly. They outlive the lease by a grace
//! period (so a write in flight is judged by the fence, not refused by the clock), and are then
//! rejected outright. On one instance they are kept in memory: a restart revokes them all. On
//! a shared fence table they are its records, for every instance (`credentials_shared.rs`).

use super::credentials_shared as shared;
use crate::fence::{FenceStore, StoreError};
use crate::wall_clock::now_ms;
use parking_lot::RwLock;
use serde::Serialize;
use std::collections::HashMap;
use std::sync::Arc;
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

/// What a credential was issued as: kept in memory on one instance, and as the record
/// (`credentials_shared.rs`) on a shared table.
#[derive(Debug, Clone, Serialize, serde::Deserialize)]
pub(super) struct Issued {
    pub secret: String,
    pub lease: String,
    pub token: u64,
    pub bucket: String,
    pub scope: String,
    pub owner: String,
    /// Who held the lease when the credential was issued.
    pub holder: String,
}

impl Issued {
    /// A new access key id (tagged with `key`), and the credential it names.
    fn new(
        key: &[u8],
        lease: &str,
        token: u64,
        (bucket, scope): (String, String),
        (owner, holder): (&str, &str),
    ) -> (String, Issued) {
        let (id, secret) = new_key_pair(key);
        let issued = Issued {
            secret,
            lease: lease.to_string(),
            token,
            bucket,
            scope,
            owner: owner.to_string(),
            holder: holder.to_string(),
        };
        (id, issued)
    }

    /// As handed to the lease holder.
    fn handed(&self, id: String) -> LeaseCredential {
        LeaseCredential {
            access_key_id: id,
            secret_access_key: self.secret.clone(),
            bucket: self.bucket.clone(),
            scope: self.scope.clone(),
        }
    }
}

#[derive(Clone)]
struct Entry {
    issued: Issued,
    /// When the lease ends: its expiry, moved by renewals, or the moment it was released or
    /// replaced. The key works until `until + grace`.
    until: Instant,
    /// On a shared table: when the key stops working (Unix ms, the grace included), as read
    /// for the request at hand; `until` is then unused.
    works_until_ms: Option<u64>,
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
    /// On a shared table: the credentials loaded for the requests at hand ([`Self::refresh`]).
    by_key: RwLock<HashMap<String, Entry>>,
    shared: Option<Arc<dyn FenceStore>>,
    /// The key ids are tagged with: on a shared table every instance's ([`shared::id_key`],
    /// read once), on one instance its own.
    id_key: tokio::sync::OnceCell<Vec<u8>>,
}

const BASE32: &[u8; 32] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZ234567";
/// An id is `FGL`, 16 random characters, and a tag of 8 made from them with the shared key.
const RANDOM_CHARS: usize = 16;
const TAG_CHARS: usize = 8;

/// HMAC-SHA256 (RFC 2104), over sha2 0.10: the `hmac` crate in the lock is of the next
/// digest generation, which this crate's sha2 is not.
fn hmac_sha256(key: &[u8], message: &[u8]) -> [u8; 32] {
    use sha2::{Digest, Sha256};
    let mut block = [0u8; 64];
    if key.len() > 64 {
        block[..32].copy_from_slice(&Sha256::digest(key));
    } else {
        block[..key.len()].copy_from_slice(key);
    }
    let pad = |byte: u8| block.map(|b| b ^ byte);
    let inner = Sha256::new()
        .chain_update(pad(0x36))
        .chain_update(message)
        .finalize();
    Sha256::new()
        .chain_update(pad(0x5c))
        .chain_update(inner)
        .finalize()
        .into()
}

/// The tag of an id's random part under `key`, in the id's alphabet (40 bits).
fn tag(key: &[u8], random: &str) -> String {
    let mac = hmac_sha256(key, random.as_bytes());
    let bits = u64::from_be_bytes(mac[..8].try_into().expect("8 bytes"));
    (0..TAG_CHARS)
        .map(|i| BASE32[((bits >> (59 - 5 * i)) & 31) as usize] as char)
        .collect()
}

/// Whether `id` is one an instance holding `key` could have issued: made-up ids are told apart
/// without a read of the shared table.
fn plausible(key: &[u8], id: &str) -> bool {
    let Some(rest) = id.strip_prefix("FGL") else {
        return false;
    };
    if rest.len() != RANDOM_CHARS + TAG_CHARS || !rest.is_ascii() {
        return false;
    }
    let (random, tagged) = rest.split_at(RANDOM_CHARS);
    // Not a secret compared: a made-up id learns nothing it could not by trying.
    tag(key, random) == tagged
}

/// A new access key id (tagged with `key`) and secret.
fn new_key_pair(key: &[u8]) -> (String, String) {
    let random = random_string(RANDOM_CHARS, BASE32);
    let id = format!("FGL{random}{}", tag(key, &random));
    let secret = random_string(
        40,
        b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789",
    );
    (id, secret)
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
            shared: None,
            // One instance tags with a key of its own (it never needs to check a tag).
            id_key: tokio::sync::OnceCell::new_with(Some(rand::random::<[u8; 32]>().to_vec())),
        }
    }

    /// The key ids are tagged with: read (or made) on the shared table once.
    async fn id_key(&self) -> Result<&[u8], StoreError> {
        let key = self
            .id_key
            .get_or_try_init(|| async {
                match self.shared.as_deref() {
                    Some(store) => shared::id_key(store).await,
                    None => Ok(rand::random::<[u8; 32]>().to_vec()),
                }
            })
            .await?;
        Ok(key)
    }

    /// The key of one instance, set when it was made.
    fn local_id_key(&self) -> &[u8] {
        self.id_key.get().map(Vec::as_slice).unwrap_or_default()
    }

    #[cfg(test)]
    pub(super) async fn plausible_here(&self, id: &str) -> Result<bool, StoreError> {
        Ok(plausible(self.id_key().await?, id))
    }

    /// Credentials kept as the records of a shared fence table, for every instance.
    pub fn shared_on(mut self, store: Arc<dyn FenceStore>) -> LeaseCredentials {
        self.shared = Some(store);
        // Every instance's key, read from the table when first needed.
        self.id_key = tokio::sync::OnceCell::new();
        self
    }

    pub fn grace(&self) -> Duration {
        self.grace
    }

    fn grace_ms(&self) -> u64 {
        self.grace.as_millis() as u64
    }

    /// Issues credentials on a shared table: written for every instance before they are shown.
    pub async fn issue_shared(
        &self,
        lease: &str,
        token: u64,
        bucket: String,
        scope: String,
        (owner, holder): (&str, &str),
    ) -> Result<LeaseCredential, StoreError> {
        let store = self
            .shared
            .as_deref()
            .expect("issue_shared on a shared table");
        let key = self.id_key().await?;
        let (id, issued) = Issued::new(key, lease, token, (bucket, scope), (owner, holder));
        shared::issue(store, &id, &issued).await?;
        Ok(issued.handed(id))
    }

    /// On a shared table, reads `access_key`'s credential and its lease as they are now, for
    /// the lookups of the request at hand ([`Self::secret`], [`Self::identity`]).
    pub async fn refresh(&self, access_key: &str) -> Result<(), StoreError> {
        let Some(store) = self.shared.as_deref() else {
            return Ok(());
        };
        if !access_key.starts_with("FGL") {
            return Ok(());
        }
        // An id no instance issued is unknown without a read of the table: a flood of made-up
        // ids costs etcd nothing.
        if !plausible(self.id_key().await?, access_key) {
            self.by_key.write().remove(access_key);
            return Ok(());
        }
        let loaded = shared::load(store, access_key).await?;
        let mut map = self.by_key.write();
        match loaded {
            None => {
                map.remove(access_key);
            }
            Some((c, until_ms)) => {
                // A grant the lease row no longer knows: known, and not working.
                let works_until_ms = if until_ms == 0 {
                    0
                } else {
                    until_ms + self.grace_ms()
                };
                map.insert(
                    access_key.to_string(),
                    Entry {
                        issued: c,
                        until: Instant::now(),
                        works_until_ms: Some(works_until_ms),
                    },
                );
            }
        }
        Ok(())
    }

    /// Revokes every credential of `lease` (an admin's revoke): on a shared table, removes
    /// their records, so no instance accepts them from the next request on.
    pub async fn revoke_everywhere(&self, lease: &str) -> Result<usize, StoreError> {
        let mut revoked = self.revoke(lease);
        if let Some(store) = self.shared.as_deref() {
            revoked = 0;
            for (id, c, _) in shared::all(store).await? {
                if c.lease == lease {
                    shared::remove(store, &id).await?;
                    revoked += 1;
                }
            }
        }
        Ok(revoked)
    }

    /// [`Self::in_grace`], on a shared table every instance's.
    pub async fn listed_in_grace(&self) -> Result<Vec<CredentialInGrace>, StoreError> {
        let Some(store) = self.shared.as_deref() else {
            return Ok(self.in_grace());
        };
        let now = now_ms();
        let mut listed: Vec<CredentialInGrace> = shared::all(store)
            .await?
            .into_iter()
            .filter(|(_, _, until)| *until != 0 && *until <= now && now <= until + self.grace_ms())
            .map(|(id, c, until)| CredentialInGrace {
                access_key_id: id,
                lease: c.lease,
                token: c.token,
                holder: c.holder,
                works_until_ms: until + self.grace_ms(),
            })
            .collect();
        listed.sort_by(|a, b| (&a.lease, a.token).cmp(&(&b.lease, b.token)));
        Ok(listed)
    }

    /// On a shared table, removes the records of credentials that no longer work.
    pub async fn prune_shared(&self) -> Result<usize, StoreError> {
        let Some(store) = self.shared.as_deref() else {
            return Ok(0);
        };
        // Only what no longer works leaves the loaded ones: a request between its refresh and
        // its lookups keeps its entry.
        self.prune();
        let now = now_ms();
        let mut pruned = 0;
        for (id, _, until) in shared::all(store).await? {
            if until == 0 || until + self.grace_ms() < now {
                shared::remove(store, &id).await?;
                pruned += 1;
            }
        }
        Ok(pruned)
    }

    pub fn issue(
        &self,
        lease: &str,
        token: u64,
        bucket: String,
        scope: String,
        (until, owner, holder): (Instant, &str, &str),
    ) -> LeaseCredential {
        let key = self.local_id_key();
        let (id, issued) = Issued::new(key, lease, token, (bucket, scope), (owner, holder));
        let handed = issued.handed(id.clone());
        self.prune();
        self.by_key.write().insert(
            id,
            Entry {
                issued,
                until,
                works_until_ms: None,
            },
        );
        handed
    }

    /// Forgets credentials whose grace is over, so the table does not grow.
    pub fn prune(&self) {
        let now = Instant::now();
        let wall = now_ms();
        self.by_key.write().retain(|_, e| match e.works_until_ms {
            Some(ms) => ms >= wall,
            None => e.until + self.grace >= now,
        });
    }

    /// The lease `lease` with `token` now ends at `until` (renewed, or ended now).
    pub fn set_until(&self, lease: &str, token: u64, until: Instant) {
        for e in self.by_key.write().values_mut() {
            if e.issued.lease == lease && e.issued.token == token {
                e.until = until;
            }
        }
    }

    /// The lease `lease` with `token` ended now (released, or a new grant replaced it).
    pub fn end(&self, lease: &str, token: u64) {
        let now = Instant::now();
        for e in self.by_key.write().values_mut() {
            if e.issued.lease == lease && e.issued.token == token && e.until > now {
                e.until = now;
            }
        }
    }

    /// Forgets every credential of `lease`, whichever grant issued it and grace included: an
    /// admin revoked the lease. Returns how many there were.
    pub fn revoke(&self, lease: &str) -> usize {
        let mut map = self.by_key.write();
        let before = map.len();
        map.retain(|_, e| e.issued.lease != lease);
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
                lease: e.issued.lease.clone(),
                token: e.issued.token,
                holder: e.issued.holder.clone(),
                works_until_ms: wall + (e.until + self.grace - now).as_millis() as u64,
            })
            .collect();
        listed.sort_by(|a, b| (&a.lease, a.token).cmp(&(&b.lease, b.token)));
        listed
    }

    /// The secret of a live key, for SigV4; None once its grace is over.
    pub fn secret(&self, access_key: &str) -> Option<String> {
        let map = self.by_key.read();
        let e = map.get(access_key)?;
        let works = match e.works_until_ms {
            Some(ms) => now_ms() <= ms,
            None => Instant::now() <= e.until + self.grace,
        };
        works.then(|| e.issued.secret.clone())
    }

    /// What a request signed with `access_key` carries, if it is a lease credential.
    pub fn identity(&self, access_key: &str) -> Option<LeaseIdentity> {
        let map = self.by_key.read();
        map.get(access_key).map(|e| LeaseIdentity {
            lease: e.issued.lease.clone(),
            token: e.issued.token,
            bucket: e.issued.bucket.clone(),
            scope: e.issued.scope.clone(),
            owner: e.issued.owner.clone(),
        })
    }
}
