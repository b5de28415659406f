//! The fence table on etcd, shared by several fencegate instances (`[fence_store] kind =
//! "etcd"`). Each row is one etcd key (`<prefix><row key>`) holding the row's JSON. A get is a
//! linearizable range read and hands back the row's `mod_revision` in [`FenceRow::rev`]; a put
//! is one Txn that writes every row only if each is still at the revision it was read at
//! (`version == 0` for a row read as absent). A failed compare is [`StoreError::Conflict`]:
//! another instance decided something about the same scope in between, and the gate reads
//! again and decides again (docs/design.md, "The cluster commit protocol").
//!
//! Every call has a deadline: an etcd that has lost its quorum answers nothing, and the
//! request gets 503 FenceStoreUnavailable instead of hanging. A put whose answer is lost may
//! have been applied; the protocol only ever records intents before the store changes, so an
//! applied-but-unanswered put leaves a raised token and a pending version, both harmless.

use super::{Durability, FenceRow, FenceStore, StoreError};
use async_trait::async_trait;
use etcd_client::{
    Certificate, Client, Compare, CompareOp, ConnectOptions, GetOptions, Identity, TlsOptions, Txn,
    TxnOp,
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
    client: Client,
    prefix: String,
    timeout: Duration,
}

fn io(e: impl std::fmt::Display) -> StoreError {
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
        let connect = Client::connect(settings.endpoints.clone(), Some(options));
        let client = tokio::time::timeout(settings.timeout, connect)
            .await
            .map_err(|_| {
                io(format!(
                    "no answer from {} within {} ms",
                    settings.endpoints.join(", "),
                    settings.timeout.as_millis()
                ))
            })?
            .map_err(io)?;
        let store = EtcdFenceStore {
            client,
            prefix: settings.prefix.clone(),
            timeout: settings.timeout,
        };
        store.get("policy:").await?;
        Ok(store)
    }

    fn key(&self, row: &str) -> String {
        format!("{}{row}", self.prefix)
    }

    async fn deadline<T>(
        &self,
        what: &str,
        call: impl Future<Output = Result<T, etcd_client::Error>>,
    ) -> Result<T, StoreError> {
        match tokio::time::timeout(self.timeout, call).await {
            Ok(result) => result.map_err(io),
            Err(_) => Err(io(format!(
                "{what} got no answer within {} ms (has etcd lost its quorum?)",
                self.timeout.as_millis()
            ))),
        }
    }
}

#[async_trait]
impl FenceStore for EtcdFenceStore {
    async fn get(&self, key: &str) -> Result<Option<FenceRow>, StoreError> {
        let mut kv = self.client.kv_client();
        let resp = self.deadline("a read", kv.get(self.key(key), None)).await?;
        match resp.kvs().first() {
            None => Ok(None),
            Some(found) => {
                let mut row = FenceRow::decode(found.value())?;
                row.rev = found.mod_revision();
                Ok(Some(row))
            }
        }
    }

    fn scan_prefix(
        &self,
        prefix: &str,
        visit: &mut dyn FnMut(&str, &FenceRow) -> bool,
    ) -> Result<(), StoreError> {
        // Called off the async workers (a blocking-pool thread), which may block on the
        // runtime; pages of 500 keep each answer small.
        let handle =
            tokio::runtime::Handle::try_current().map_err(|_| io("a scan needs the runtime"))?;
        let full = self.key(prefix);
        let end = prefix_end(full.as_bytes());
        let mut from = full.clone().into_bytes();
        loop {
            let mut kv = self.client.kv_client();
            let options = GetOptions::new().with_range(end.clone()).with_limit(500);
            let resp =
                handle.block_on(self.deadline("a scan", kv.get(from.clone(), Some(options))))?;
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
        for (key, row) in &rows {
            let key = self.key(key);
            compares.push(if row.rev == 0 {
                Compare::version(key.clone(), CompareOp::Equal, 0)
            } else {
                Compare::mod_revision(key.clone(), CompareOp::Equal, row.rev)
            });
            ops.push(TxnOp::put(key, row.encode(), None));
        }
        let txn = Txn::new().when(compares).and_then(ops);
        let mut kv = self.client.kv_client();
        let resp = self.deadline("a write", kv.txn(txn)).await?;
        if !resp.succeeded() {
            let keys: Vec<&str> = rows.iter().map(|(k, _)| k.as_str()).collect();
            return Err(StoreError::Conflict(keys.join(", ")));
        }
        Ok(resp.header().map_or(0, |h| h.revision()))
    }

    fn shared(&self) -> bool {
        true
    }
}

/// The first key after every key that starts with `prefix` (etcd's range end for a prefix).
fn prefix_end(prefix: &[u8]) -> Vec<u8> {
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
