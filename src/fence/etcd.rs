//! The fence table on etcd, shared by several fencegate instances (`[fence_store] kind =
//! "etcd"`). Each row is one etcd key (`<prefix><row key>`) holding the row's JSON. A get is a
//! linearizable range read and hands back the row's `mod_revision` in [`FenceRow::rev`]; a put
//! is one Txn that writes every row only if each is still at the revision it was read at
//! (`version == 0` for a row read as absent). A failed compare is [`StoreError::Conflict`]:
//! another instance decided something about the same scope in between, and the gate reads
//! again and decides again (docs/design.md, "The cluster commit protocol").
//!
//! Every call has a deadline: an etcd that has lost its quorum answers nothing, and the
//! request gets 503 FenceStoreUnavailable instead of hanging. There is one client per member:
//! etcd-client's balanced channel keeps sending to a member that is down, so a call that
//! cannot reach one member is made on the next, within the same deadline. A put whose answer
//! is lost may have been applied; the protocol only ever records intents before the store
//! changes, so an applied-but-unanswered put leaves a raised token and a pending version, both
//! harmless.

use super::{Durability, FenceRow, FenceStore, StoreError};
use async_trait::async_trait;
use etcd_client::{
    Certificate, Client, Compare, CompareOp, ConnectOptions, GetOptions, Identity, TlsOptions, Txn,
    TxnOp, TxnOpResponse,
};
use std::future::Future;
use std::path::PathBuf;
use std::time::Duration;

/// How to reach etcd: `[fence_store]` with `kind = "etcd"`.
#[derive(Debug, Clone)]
pub struct EtcdSettings {
    pub endpoints: Vec<String>,
    /// Prepended to every row key, so several deployments can share one etcd.
    pub prefix: String,
    pub user: Option<(String, String)>,
    pub ca_file: Option<PathBuf>,
    /// Client certificate and key, for etcd's `--client-cert-auth`.
    pub identity: Option<(PathBuf, PathBuf)>,
    /// Deadline of each call.
    pub timeout: Duration,
}

pub struct EtcdFenceStore {
    pub(super) members: std::sync::Arc<Members>,
    pub(super) prefix: String,
    /// Puts made while others are in flight share one Txn (`etcd_batch.rs`).
    batch: super::etcd_batch::Batcher,
    /// The endpoint of each client in `members`, in order.
    endpoints: Vec<String>,
    /// Endpoints that could not be connected at start-up, with why: they stay out until a
    /// restart, and `fencegate status` names them.
    unconnected: Vec<(String, String)>,
}

/// The cluster's members, and how a call reaches one that answers.
pub(super) struct Members {
    /// One client per member, in `endpoints` order.
    clients: Vec<Client>,
    /// The member that answered last: calls start there.
    preferred: std::sync::atomic::AtomicUsize,
    timeout: Duration,
}

/// Whether a failed call never reached a member that could serve it (down, unreachable, or
/// without a leader): then it is made on another member. Anything else is the answer.
fn elsewhere(e: &etcd_client::Error) -> bool {
    match e {
        etcd_client::Error::TransportError(_) => true,
        // A member killed mid-call resets its connection, which tonic reports as Unknown (or
        // Cancelled) rather than Unavailable. A write it may have applied cannot apply twice:
        // its compares fail on the next member.
        etcd_client::Error::GRpcStatus(s) => match s.code() {
            tonic::Code::Unavailable | tonic::Code::Cancelled => true,
            tonic::Code::Unknown => {
                let m = s.message().to_ascii_lowercase();
                m.contains("transport") || m.contains("connection")
            }
            _ => false,
        },
        _ => false,
    }
}

pub(super) fn io(e: impl std::fmt::Display) -> StoreError {
    StoreError::Io(format!("etcd: {e}"))
}

impl EtcdFenceStore {
    /// Connects and checks that etcd answers a linearizable read (which needs a quorum).
    pub async fn connect(settings: &EtcdSettings) -> Result<EtcdFenceStore, StoreError> {
        let mut options = ConnectOptions::new()
            .with_timeout(settings.timeout)
            .with_connect_timeout(settings.timeout)
            .with_keep_alive(Duration::from_secs(10), settings.timeout)
            // A member cut off from the leader must not serve: it answers "no leader" at once.
            .with_require_leader(true);
        if let Some((user, password)) = &settings.user {
            options = options.with_user(user.clone(), password.clone());
        }
        let tls_wanted = settings.endpoints.iter().any(|e| e.starts_with("https://"));
        if tls_wanted || settings.ca_file.is_some() || settings.identity.is_some() {
            let mut tls = TlsOptions::new();
            if let Some(ca) = &settings.ca_file {
                let pem = std::fs::read(ca)
                    .map_err(|e| io(format!("cannot read the CA file {}: {e}", ca.display())))?;
                tls = tls.ca_certificate(Certificate::from_pem(pem));
            }
            if let Some((cert, key)) = &settings.identity {
                let read = |p: &PathBuf| {
                    std::fs::read(p).map_err(|e| io(format!("cannot read {}: {e}", p.display())))
                };
                tls = tls.identity(Identity::from_pem(read(cert)?, read(key)?));
            }
            options = options.with_tls(tls);
        }
        // Connections are made lazily; with auth, connecting asks for a token, which a member
        // that is down cannot give: it is left out, and the others serve.
        let mut clients = Vec::new();
        let mut endpoints = Vec::new();
        let mut unconnected = Vec::new();
        for endpoint in &settings.endpoints {
            let connect = Client::connect([endpoint.as_str()], Some(options.clone()));
            match tokio::time::timeout(settings.timeout, connect).await {
                Ok(Ok(client)) => {
                    clients.push(client);
                    endpoints.push(endpoint.clone());
                }
                Ok(Err(e)) => unconnected.push((endpoint.clone(), e.to_string())),
                Err(_) => unconnected.push((
                    endpoint.clone(),
                    format!("no answer within {} ms", settings.timeout.as_millis()),
                )),
            }
        }
        if clients.is_empty() {
            let failures: Vec<String> = unconnected
                .iter()
                .map(|(endpoint, e)| format!("{endpoint}: {e}"))
                .collect();
            return Err(io(failures.join("; ")));
        }
        for (endpoint, error) in &unconnected {
            tracing::warn!(%endpoint, %error, "an etcd member could not be connected; the others serve (until a restart, this instance does not use it)");
        }
        let members = std::sync::Arc::new(Members {
            clients,
            preferred: std::sync::atomic::AtomicUsize::new(0),
            timeout: settings.timeout,
        });
        let store = EtcdFenceStore {
            batch: super::etcd_batch::Batcher::start(members.clone()),
            members,
            prefix: settings.prefix.clone(),
            endpoints,
            unconnected,
        };
        store.get("policy:").await?;
        Ok(store)
    }

    fn key(&self, row: &str) -> String {
        format!("{}{row}", self.prefix)
    }
}

impl Members {
    /// Makes `call` on the preferred member, and on the next ones while a member cannot serve
    /// it ([`elsewhere`]), all within one deadline. A write that failed to reach a member was
    /// not applied by it; one that reached a member and lost its answer is not made again.
    pub(super) async fn call<T, F, Fut>(&self, what: &str, call: F) -> Result<T, StoreError>
    where
        F: Fn(Client) -> Fut,
        Fut: Future<Output = Result<T, etcd_client::Error>>,
    {
        use std::sync::atomic::Ordering::Relaxed;
        // A member that hangs (paused, partitioned) must not use up the whole deadline: the
        // preferred member gets half of it, the others share the rest, each then asked in
        // turn. Half, not a third: a healthy but slow etcd must still answer through its first
        // member. A write that timed out on one member and is made on another cannot apply
        // twice: its Txn compares the rows' revisions, and fails if the first one applied.
        let members = self.clients.len();
        let share = |i: usize| {
            let share = match (i, members) {
                (_, 1) => self.timeout,
                (0, _) => self.timeout / 2,
                _ => self.timeout / 2 / (members as u32 - 1),
            };
            share.max(Duration::from_millis(300))
        };
        let attempts = async {
            let first = self.preferred.load(Relaxed);
            let mut last = None;
            for i in 0..members {
                let n = (first + i) % members;
                match tokio::time::timeout(share(i), call(self.clients[n].clone())).await {
                    Ok(Ok(answer)) => {
                        self.preferred.store(n, Relaxed);
                        return Ok(answer);
                    }
                    Ok(Err(e)) if elsewhere(&e) => last = Some(e.to_string()),
                    Ok(Err(e)) => return Err(io(e)),
                    Err(_) => last = Some(format!("{what}: member {n} gave no answer in time")),
                }
                // Later calls start past the member that failed.
                let _ = self
                    .preferred
                    .compare_exchange(n, (n + 1) % members, Relaxed, Relaxed);
            }
            Err(io(last.unwrap_or_else(|| "no member".into())))
        };
        match tokio::time::timeout(self.timeout, attempts).await {
            Ok(result) => result,
            Err(_) => Err(io(format!(
                "{what} got no answer within {} ms from any member: etcd has lost its quorum, or answers slower than [fence_store] timeout_ms allows (the preferred member gets half of it)",
                self.timeout.as_millis()
            ))),
        }
    }
}

#[async_trait]
impl FenceStore for EtcdFenceStore {
    async fn get(&self, key: &str) -> Result<Option<FenceRow>, StoreError> {
        let key = self.key(key);
        let resp = self
            .members
            .call("a read", |c| {
                let key = key.clone();
                async move { c.kv_client().get(key, None).await }
            })
            .await?;
        resp.kvs().first().map(row_of).transpose()
    }

    async fn get_pair(
        &self,
        key: &str,
        with: &str,
    ) -> Result<(Option<FenceRow>, Option<FenceRow>), StoreError> {
        // A read-only Txn: linearizable as a range is, and both rows at one revision.
        let txn = Txn::new().and_then([
            TxnOp::get(self.key(key), None),
            TxnOp::get(self.key(with), None),
        ]);
        let resp = self
            .members
            .call("a read", |c| {
                let txn = txn.clone();
                async move { c.kv_client().txn(txn).await }
            })
            .await?;
        let mut rows = resp.op_responses().into_iter().map(|op| match op {
            TxnOpResponse::Get(got) => got.kvs().first().map(row_of).transpose(),
            _ => Err(io(
                "a read-only Txn answered something other than its reads",
            )),
        });
        let mut next = || {
            rows.next()
                .unwrap_or_else(|| Err(io("a read-only Txn answered too few reads")))
        };
        Ok((next()?, next()?))
    }

    fn scan_after(
        &self,
        prefix: &str,
        after: Option<&str>,
        visit: &mut dyn FnMut(&str, &FenceRow) -> bool,
    ) -> Result<(), StoreError> {
        // Called off the async workers (a blocking-pool thread), which may block on the
        // runtime; pages of 500 keep each answer small.
        let handle =
            tokio::runtime::Handle::try_current().map_err(|_| io("a scan needs the runtime"))?;
        let full = self.key(prefix);
        let end = prefix_end(full.as_bytes());
        let mut from = full.clone().into_bytes();
        if let Some(after) = after {
            // The first key after `after` is `after` followed by NUL.
            let mut next = self.key(after).into_bytes();
            next.push(0);
            from = from.max(next);
        }
        loop {
            if end != [0] && from >= end {
                // `after` lies past every key of the prefix: nothing is left to read.
                return Ok(());
            }
            let resp = handle.block_on(self.members.call("a scan", |c| {
                let (from, end) = (from.clone(), end.clone());
                async move {
                    let options = GetOptions::new().with_range(end).with_limit(500);
                    c.kv_client().get(from, Some(options)).await
                }
            }))?;
            for found in resp.kvs() {
                let key = String::from_utf8_lossy(&found.key()[self.prefix.len()..]).into_owned();
                let mut row = FenceRow::decode(found.value())?;
                row.rev = found.mod_revision();
                if !visit(&key, &row) {
                    return Ok(());
                }
            }
            match resp.kvs().last() {
                Some(last) if resp.more() => {
                    from = last.key().to_vec();
                    from.push(0);
                }
                _ => return Ok(()),
            }
        }
    }

    async fn put(
        &self,
        rows: Vec<(String, FenceRow)>,
        _durability: Durability,
    ) -> Result<i64, StoreError> {
        // Every etcd put is durable on a quorum; a lazy put costs the same as a synced one.
        let mut compares = Vec::with_capacity(rows.len());
        let mut ops = Vec::with_capacity(rows.len());
        let mut bytes = 0;
        for (key, row) in &rows {
            let key = self.key(key);
            compares.push(at_revision(&key, row.rev));
            if let (0, Some((floor, rev))) = (row.rev, &row.floor_guard) {
                compares.push(at_revision(&self.key(floor), *rev));
            }
            let value = row.encode();
            bytes += key.len() + value.len();
            ops.push(TxnOp::put(key, value, None));
        }
        let keys = rows.into_iter().map(|(k, _)| k).collect();
        self.batch.put(keys, compares, ops, bytes).await
    }

    async fn fold(
        &self,
        floor: Option<(String, FenceRow)>,
        gone: Vec<(String, i64)>,
    ) -> Result<i64, StoreError> {
        let mut keys = Vec::with_capacity(gone.len() + 1);
        let mut compares = Vec::with_capacity(gone.len() + 1);
        let mut ops = Vec::with_capacity(gone.len() + 1);
        if let Some((key, row)) = floor {
            let full = self.key(&key);
            let value = row.encode();
            compares.push(at_revision(&full, row.rev));
            ops.push(TxnOp::put(full, value, None));
            keys.push(key);
        }
        for (key, rev) in gone {
            let full = self.key(&key);
            compares.push(at_revision(&full, rev));
            ops.push(TxnOp::delete(full, None));
            keys.push(key);
        }
        // Sent alone, never in a batch: a batch may hold puts whose floor guard compares the
        // floor this writes, and the order of a batch's inner Txns is not theirs to rely on.
        let txn = Txn::new().when(compares).and_then(ops);
        let resp = self
            .members
            .call("a fold", |c| {
                let txn = txn.clone();
                async move { c.kv_client().txn(txn).await }
            })
            .await?;
        if !resp.succeeded() {
            return Err(StoreError::Conflict(keys.join(", ")));
        }
        Ok(resp.header().map_or(0, |h| h.revision()))
    }

    fn shared(&self) -> bool {
        true
    }

    fn records(&self) -> Option<&dyn super::Records> {
        Some(self)
    }

    async fn members(&self) -> Vec<super::Member> {
        let asked = self
            .members
            .clients
            .iter()
            .zip(&self.endpoints)
            .map(|(client, endpoint)| {
                let mut client = client.clone();
                async move {
                    let timeout = self.members.timeout;
                    match tokio::time::timeout(timeout, client.status()).await {
                        Ok(Ok(status)) => member_of(endpoint, &status),
                        Ok(Err(e)) => down(endpoint, e.to_string()),
                        Err(_) => down(
                            endpoint,
                            format!("no answer within {} ms", timeout.as_millis()),
                        ),
                    }
                }
            });
        let mut members = futures::future::join_all(asked).await;
        members.extend(self.unconnected.iter().map(|(endpoint, error)| {
            down(
                endpoint,
                format!("not connected since start-up ({error}); restart this instance to use it"),
            )
        }));
        members
    }
}

fn member_of(endpoint: &str, status: &etcd_client::StatusResponse) -> super::Member {
    let id = status.header().map(|h| h.member_id());
    super::Member {
        endpoint: endpoint.to_string(),
        ok: true,
        leader: id.is_some_and(|id| id == status.leader()),
        version: Some(status.version().to_string()),
        db_size_bytes: u64::try_from(status.db_size()).ok(),
        raft_index: Some(status.raft_index()),
        error: (!status.errors().is_empty()).then(|| status.errors().join("; ")),
    }
}

fn down(endpoint: &str, error: String) -> super::Member {
    super::Member {
        endpoint: endpoint.to_string(),
        ok: false,
        leader: false,
        version: None,
        db_size_bytes: None,
        raft_index: None,
        error: Some(error),
    }
}

/// A row as etcd holds it, with its revision.
fn row_of(found: &etcd_client::KeyValue) -> Result<FenceRow, StoreError> {
    let mut row = FenceRow::decode(found.value())?;
    row.rev = found.mod_revision();
    Ok(row)
}

/// The compare that holds while the row `key` (with the table's prefix) is still at `rev`
/// (0: still absent).
fn at_revision(key: &str, rev: i64) -> Compare {
    if rev == 0 {
        Compare::version(key, CompareOp::Equal, 0)
    } else {
        Compare::mod_revision(key, CompareOp::Equal, rev)
    }
}

/// The first key after every key that starts with `prefix` (etcd's range end for a prefix).
pub(super) fn prefix_end(prefix: &[u8]) -> Vec<u8> {
    let mut end = prefix.to_vec();
    while let Some(last) = end.pop() {
        if last < 0xff {
            end.push(last + 1);
            return end;
        }
    }
    vec![0]
}

#[cfg(test)]
mod tests {
    use super::prefix_end;

    #[test]
    fn prefix_end_is_the_next_key_after_the_prefix() {
        assert_eq!(prefix_end(b"fg/"), b"fg0".to_vec());
        assert_eq!(prefix_end(b"a\xff"), b"b".to_vec());
        assert_eq!(prefix_end(b"\xff"), vec![0]);
    }
}
