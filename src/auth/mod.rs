//! Who is calling, and may they: the one key table every surface authenticates against
//! (`[keys.NAME]`), the principals a request can carry, and the permission each action needs
//! (README, "Security"). Surfaces find the principal (SigV4 on the native API here in
//! `native.rs`, `s3s` on the S3 API), then ask [`KeyTable::authorize`]; nothing else decides.
//!
//! Without keys fencegate is in development mode: anonymous requests and the well-known
//! development key may do everything, and the server refuses to listen beyond loopback
//! (`server.rs`, protected mode).

pub mod admin;
pub mod native;
pub mod sigv4;
pub mod unverified;

use crate::config::{Key, Permission};
use crate::gate::Gate;
use crate::lease::{LeaseIdentity, Leases};
use std::collections::BTreeMap;
use std::sync::Arc;

/// The key that works in development mode (like MinIO's `minioadmin`).
pub const DEV_KEY: (&str, &str) = ("fencegate", "fencegate-dev-secret");

/// Who a request comes from.
#[derive(Debug, Clone)]
pub enum Principal {
    /// Development mode: anyone, anonymous or with the development key.
    Dev,
    Key(Arc<Key>),
    /// Lease-bound S3 credentials.
    Lease(LeaseIdentity),
    /// The admin surface's bearer token (`[admin] bearer_token_file`): administration only.
    AdminToken,
}

impl Principal {
    /// The name audit lines carry.
    pub fn name(&self) -> String {
        match self {
            Principal::Dev => "dev-mode".into(),
            Principal::Key(k) => format!("key:{}", k.name),
            Principal::Lease(l) => format!("lease:{}#{}", l.lease, l.token),
            Principal::AdminToken => "admin-token".into(),
        }
    }

    /// Whose request it is, for the bounds per key: a lease's credentials count as the
    /// principal that acquired the lease, whichever grant issued them.
    pub fn owner(&self) -> String {
        match self {
            Principal::Lease(l) => l.owner.clone(),
            other => other.name(),
        }
    }
}

/// What a request wants to do.
#[derive(Debug, Clone, Copy)]
pub enum Action<'a> {
    Read {
        bucket: &'a str,
    },
    /// Write or delete one object (`perm` is Write or Delete). `scope_header` is the request's
    /// `Fencing-Scope`, which lease credentials' scope is compared with.
    Object {
        perm: Permission,
        bucket: &'a str,
        key: &'a str,
        scope_header: Option<&'a [u8]>,
    },
    /// A bucket-level change (DeleteObjects' batch, uploads listing aside): `perm` on it.
    Bucket {
        perm: Permission,
        bucket: &'a str,
    },
    /// Acquire, renew, release or show the lease `name`, bound to `bucket` when set.
    Lease {
        name: &'a str,
        bucket: Option<&'a str>,
    },
    CreateBucket {
        bucket: &'a str,
    },
    DeleteBucket {
        bucket: &'a str,
    },
    Admin,
}

/// The audit line's `action`: the permission and what it is on, as the configuration spells
/// them (`write reports/r.csv`, `lease nightly on reports`).
impl std::fmt::Display for Action<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Action::Read { bucket } => write!(f, "read {bucket}"),
            Action::Object {
                perm, bucket, key, ..
            } => write!(f, "{} {bucket}/{key}", perm.as_str()),
            Action::Bucket { perm, bucket } => write!(f, "{} bucket {bucket}", perm.as_str()),
            Action::Lease { name, bucket } => match bucket {
                Some(b) => write!(f, "lease {name} on {b}"),
                None => write!(f, "lease {name}"),
            },
            Action::CreateBucket { bucket } => write!(f, "create bucket {bucket}"),
            Action::DeleteBucket { bucket } => write!(f, "delete bucket {bucket}"),
            Action::Admin => f.write_str("admin"),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AuthError {
    #[error("this server requires credentials: sign the request with SigV4 using a key from [keys] (curl --aws-sigv4 \"aws:amz:us-east-1:s3\" --user KEY:SECRET)")]
    Missing,
    #[error("the access key id {0:?} is not in [keys] and is not a live lease credential")]
    UnknownKey(String),
    #[error("these lease credentials expired with their lease (plus the grace period); acquire the lease again for new ones")]
    ExpiredLease,
    #[error("the signature does not match: check the secret, and that the request was not changed after signing")]
    BadSignature,
    #[error("{0}")]
    Malformed(String),
    #[error("{0}")]
    Skewed(String),
    #[error("{0}")]
    Denied(String),
    #[error("the request body came too slowly (cut off at {0} s); send it at once, or sign x-amz-content-sha256 (UNSIGNED-PAYLOAD or its SHA-256) so that it can stream")]
    Stalled(u64),
    #[error("fencegate already holds {0} bytes of request bodies whose signature it cannot check before they end (signed over the body's hash, as curl does without x-amz-content-sha256); retry shortly, or sign x-amz-content-sha256 (UNSIGNED-PAYLOAD or the body's SHA-256) so that the body streams ([server] max_unverified_body_bytes)")]
    Busy(usize),
    /// A lease credential could not be checked: the shared fence table did not answer.
    #[error("cannot check this lease credential now, the fence table did not answer ({0}); retry shortly")]
    Unavailable(String),
}

impl AuthError {
    pub fn status(&self) -> u16 {
        match self {
            AuthError::Missing => 401,
            AuthError::Malformed(_) => 400,
            AuthError::Stalled(_) => 408,
            AuthError::Busy(_) | AuthError::Unavailable(_) => 503,
            _ => 403,
        }
    }

    pub fn code(&self) -> &'static str {
        match self {
            AuthError::Missing => "MissingCredentials",
            AuthError::UnknownKey(_) | AuthError::ExpiredLease => "InvalidAccessKeyId",
            AuthError::BadSignature => "SignatureDoesNotMatch",
            AuthError::Stalled(_) => "RequestTimeout",
            AuthError::Malformed(_) => "AuthorizationHeaderMalformed",
            AuthError::Skewed(_) => "RequestTimeTooSkewed",
            AuthError::Denied(_) => "AccessDenied",
            AuthError::Busy(_) => "SlowDown",
            AuthError::Unavailable(_) => "FenceStoreUnavailable",
        }
    }
}

impl From<sigv4::SigError> for AuthError {
    fn from(e: sigv4::SigError) -> Self {
        match e {
            sigv4::SigError::Malformed(m) => AuthError::Malformed(m),
            s @ sigv4::SigError::Skewed(_) => AuthError::Skewed(s.to_string()),
        }
    }
}

/// The configured keys by access key id, plus the lease service's short-lived ones.
///
/// The configured keys are one snapshot, swapped whole by a reload ([`KeyTable::replace`]):
/// every surface holds this same table, so a key removed by a reload is refused by each of
/// them from the swap on, and a lookup never sees half of one configuration and half of
/// another.
pub struct KeyTable {
    current: arc_swap::ArcSwap<KeySet>,
    leases: Option<Arc<Leases>>,
    gate: Option<Arc<Gate>>,
    /// What every surface that checks signatures itself may hold of bodies not yet checked.
    pub unverified: unverified::UnverifiedBodies,
}

/// One configuration's keys.
pub struct KeySet {
    by_id: BTreeMap<String, Arc<Key>>,
    dev: bool,
}

impl KeySet {
    /// No keys: development mode.
    pub fn new(keys: impl IntoIterator<Item = Key>) -> KeySet {
        let by_id: BTreeMap<_, _> = keys
            .into_iter()
            .map(|k| (k.access_key_id.clone(), Arc::new(k)))
            .collect();
        KeySet {
            dev: by_id.is_empty(),
            by_id,
        }
    }

    pub fn dev_mode(&self) -> bool {
        self.dev
    }
}

impl KeyTable {
    /// No keys: development mode.
    pub fn new(keys: impl IntoIterator<Item = Key>) -> KeyTable {
        KeyTable {
            current: arc_swap::ArcSwap::from_pointee(KeySet::new(keys)),
            leases: None,
            gate: None,
            unverified: unverified::UnverifiedBodies::new(unverified::DEFAULT_BUDGET),
        }
    }

    /// Bodies read before their signature is checked share a budget of `bytes`, process-wide.
    pub fn with_unverified_budget(mut self, bytes: usize) -> KeyTable {
        self.unverified = unverified::UnverifiedBodies::new(bytes);
        self
    }

    /// Also accepts lease-bound credentials issued by `leases`, confined to their lease's
    /// scope as `gate` resolves it.
    pub fn with_leases(mut self, leases: Arc<Leases>, gate: Arc<Gate>) -> KeyTable {
        self.leases = Some(leases);
        self.gate = Some(gate);
        self
    }

    /// Serves `keys` from now on: every lookup that starts after this returns sees them and
    /// only them. Switching between development mode and keys is refused: protected mode
    /// (loopback only) was decided at start-up on the keys the process started with.
    pub fn replace(&self, keys: KeySet) -> Result<(), &'static str> {
        if keys.dev != self.current.load().dev {
            return Err("switching between development mode (no keys) and keys needs a restart");
        }
        self.current.store(Arc::new(keys));
        Ok(())
    }

    pub fn dev_mode(&self) -> bool {
        self.current.load().dev
    }

    /// The principal of a request that carries no credentials.
    pub fn anonymous(&self) -> Result<Principal, AuthError> {
        if self.dev_mode() {
            Ok(Principal::Dev)
        } else {
            Err(AuthError::Missing)
        }
    }

    /// [`Self::lookup`], a lease credential read first as the shared fence table holds it
    /// now (on one instance, as `lookup`): the entry point of every signed S3 request.
    pub async fn lookup_fresh(&self, access_key: &str) -> Result<(String, Principal), AuthError> {
        if let Some(leases) = &self.leases {
            leases
                .credentials
                .refresh(access_key)
                .await
                .map_err(|e| AuthError::Unavailable(e.to_string()))?;
        }
        self.lookup(access_key)
    }

    /// The secret that signs for `access_key`, and who that is.
    pub fn lookup(&self, access_key: &str) -> Result<(String, Principal), AuthError> {
        // One snapshot for the whole lookup.
        let keys = self.current.load();
        if keys.dev && access_key == DEV_KEY.0 {
            return Ok((DEV_KEY.1.to_string(), Principal::Dev));
        }
        if let Some(k) = keys.by_id.get(access_key) {
            return Ok((k.secret_access_key.clone(), Principal::Key(k.clone())));
        }
        if let Some(leases) = &self.leases {
            if let Some(secret) = leases.credentials.secret(access_key) {
                if let Some(identity) = leases.credentials.identity(access_key) {
                    return Ok((secret, Principal::Lease(identity)));
                }
            }
            if leases.credentials.identity(access_key).is_some() {
                return Err(AuthError::ExpiredLease);
            }
        }
        Err(AuthError::UnknownKey(access_key.to_string()))
    }

    /// The principal behind a SigV4 access key, for `s3s` (which checked the signature).
    pub fn principal(&self, access_key: Option<&str>) -> Result<Principal, AuthError> {
        match access_key {
            None => self.anonymous(),
            Some(a) => self.lookup(a).map(|(_, p)| p),
        }
    }

    /// May `who` do `action`? The refusal says what is missing.
    pub fn authorize(&self, who: &Principal, action: Action<'_>) -> Result<(), AuthError> {
        let (allowed, why) = match who {
            Principal::Dev => (true, None),
            Principal::Key(k) => (key_allows(k, action), None),
            Principal::Lease(l) if !self.lease_allows(l, action) => (false, None),
            // Within its lease's reach, the credentials still do no more than the key that
            // acquired the lease holds now: its rights are read again at every request, so a
            // reload that narrows the key narrows its live credentials too.
            Principal::Lease(l) => match self.owner_allows(&l.owner, action) {
                true => (true, None),
                false => (false, Some(owner_denial(l, action))),
            },
            Principal::AdminToken => (matches!(action, Action::Admin), None),
        };
        if allowed {
            return Ok(());
        }
        let why = why.unwrap_or_else(|| denial(who, action));
        // A string value: the text log quotes and escapes it, as a key may hold any character.
        let action = action.to_string();
        tracing::info!(target: "fencegate::audit", principal = %who.name(), action = action.as_str(), "access denied");
        Err(AuthError::Denied(why))
    }

    /// Whether the principal named `owner` (a lease's acquirer, [`Principal::name`]) may do
    /// `action` under the keys served now. A key removed since the lease was acquired may do
    /// nothing; the development principal, everything while the server runs without keys.
    fn owner_allows(&self, owner: &str, action: Action<'_>) -> bool {
        let keys = self.current.load();
        if owner == Principal::Dev.name() {
            return keys.dev;
        }
        let Some(name) = owner.strip_prefix("key:") else {
            return false;
        };
        keys.by_id
            .values()
            .find(|k| k.name == name)
            .is_some_and(|k| key_allows(k, action))
    }

    /// Lease credentials reach their lease's bucket, and change only objects in the lease's
    /// scope; never bucket-level changes, leases or administration.
    fn lease_allows(&self, l: &LeaseIdentity, action: Action<'_>) -> bool {
        match action {
            Action::Read { bucket } => bucket == l.bucket,
            Action::Object {
                perm: Permission::Write | Permission::Delete,
                bucket,
                key,
                scope_header,
            } => {
                bucket == l.bucket
                    && self.gate.as_ref().is_some_and(|g| {
                        g.scope_of(bucket, key, scope_header)
                            .is_ok_and(|s| s == l.scope)
                    })
            }
            // CreateBucket of the lease's own bucket only ensures it exists (s3api/buckets.rs
            // answers it as an existing bucket; lease credentials never create one).
            Action::CreateBucket { bucket } => bucket == l.bucket,
            _ => false,
        }
    }
}

/// May the configured key `k` do `action`?
fn key_allows(k: &Key, action: Action<'_>) -> bool {
    match action {
        Action::Read { bucket } => k.allows(Permission::Read, bucket),
        Action::Object { perm, bucket, .. } | Action::Bucket { perm, bucket } => {
            k.allows(perm, bucket)
        }
        Action::Lease { name, bucket } => {
            k.may_lease(name) && bucket.is_none_or(|b| k.allows(Permission::Lease, b))
        }
        Action::CreateBucket { bucket } => k.allows(Permission::Write, bucket),
        Action::DeleteBucket { bucket } => k.allows(Permission::Delete, bucket),
        Action::Admin => k.admin,
    }
}

/// Why lease credentials within their lease's reach are refused: the key behind them lacks it.
fn owner_denial(l: &LeaseIdentity, action: Action<'_>) -> String {
    let needs = match action {
        Action::Read { bucket } => format!("\"read\" on {bucket}"),
        Action::Object { perm, bucket, .. } => format!("\"{}\" on {bucket}", perm.as_str()),
        Action::CreateBucket { bucket } => format!("\"write\" on {bucket}"),
        other => other.to_string(),
    };
    format!(
        "lease credentials of lease {:?} do no more than {}, which acquired the lease, and it does not hold {needs} (or is no longer configured); grant it there, or use a key that holds it",
        l.lease, l.owner
    )
}

/// What a lease's credentials may change, in words: `BUCKET/KEY` for a lease on one object.
fn lease_reach(l: &LeaseIdentity) -> String {
    match l.scope.split_once(':') {
        Some(("object", path)) => path.to_string(),
        Some(("prefix", path)) => format!("keys under {path}/"),
        Some(("bucket", bucket)) => format!("keys of bucket {bucket}"),
        _ => format!("keys of scope {}", l.scope),
    }
}

fn denial(who: &Principal, action: Action<'_>) -> String {
    if let (Principal::Lease(l), Action::Object { perm, .. }) = (who, action) {
        return format!(
            "lease credentials of lease {:?} may {} only {}; acquire a lease on this key's scope to change it",
            l.lease,
            if perm == Permission::Delete { "delete" } else { "write" },
            lease_reach(l)
        );
    }
    let lease = matches!(who, Principal::Lease(_));
    let who = who.name();
    match action {
        Action::Read { bucket } => format!(
            "{who} may not read bucket {bucket}; grant it \"read\" on a pattern matching it"
        ),
        Action::Object {
            perm, bucket, key, ..
        } => format!(
            "{who} may not {} {bucket}/{key}; grant it {perm:?} on a pattern matching {bucket}",
            if perm == Permission::Delete {
                "delete"
            } else {
                "write"
            }
        ),
        Action::Bucket { perm, bucket } => format!("{who} needs {perm:?} on bucket {bucket}"),
        Action::Lease { name, bucket } => format!(
            "{who} may not hold lease {name:?}{}; add it to the key's lease_names{}",
            bucket
                .map(|b| format!(" bound to bucket {b}"))
                .unwrap_or_default(),
            if bucket.is_some() {
                " and grant \"lease\" on the bucket"
            } else {
                ""
            }
        ),
        Action::CreateBucket { bucket } if lease => {
            format!("lease credentials never create buckets, and {bucket} is not this lease's")
        }
        Action::DeleteBucket { .. } if lease => {
            "lease credentials never delete buckets".to_string()
        }
        Action::CreateBucket { bucket } => {
            format!("{who} needs \"write\" on {bucket} to create it")
        }
        Action::DeleteBucket { bucket } => {
            format!("{who} needs \"delete\" on {bucket} to delete it")
        }
        Action::Admin => format!("{who} is not an admin key"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(name: &str, id: &str, admin: bool) -> Key {
        Key {
            name: name.into(),
            access_key_id: id.into(),
            secret_access_key: format!("{id}-secret"),
            buckets: BTreeMap::new(),
            lease_names: vec![],
            admin,
        }
    }

    #[test]
    fn a_replaced_table_serves_the_new_keys_only() {
        let table = KeyTable::new([key("a", "A", true), key("b", "B", false)]);
        let (_, who) = table.lookup("A").unwrap();
        assert!(table.authorize(&who, Action::Admin).is_ok());
        table
            .replace(KeySet::new([key("a", "A", false), key("c", "C", false)]))
            .unwrap();
        assert_eq!(
            table.lookup("B").unwrap_err(),
            AuthError::UnknownKey("B".into())
        );
        assert!(table.lookup("C").is_ok());
        let (_, who) = table.lookup("A").unwrap();
        assert!(table.authorize(&who, Action::Admin).is_err());
        // Development mode is decided at start-up: no switching either way.
        assert!(table.replace(KeySet::new([])).is_err());
        assert!(table.lookup("C").is_ok());
        let dev = KeyTable::new([]);
        assert!(dev.replace(KeySet::new([key("a", "A", true)])).is_err());
        assert!(dev.anonymous().is_ok());
    }
}
