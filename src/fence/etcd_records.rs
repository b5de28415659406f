//! The shared records (`records.rs`) on etcd: each one key under `<prefix without its last
//! `/`>#records/`, beside the fence rows' `<prefix>` and outside it, so that no scan of the
//! fence rows meets a record. Conditions are Txn compares, so instances that race are ordered
//! by etcd: one creates a record, one removes it, and a part is never written under an upload
//! another instance removed.

use super::etcd::{prefix_end, EtcdFenceStore};
use super::records::{Expect, Records, Swap, When};
use super::StoreError;
use async_trait::async_trait;
use etcd_client::{Compare, CompareOp, DeleteOptions, GetOptions, Txn, TxnOp};

impl EtcdFenceStore {
    fn record_key(&self, key: &str) -> String {
        format!("{}#records/{key}", self.prefix.trim_end_matches('/'))
    }
}

#[async_trait]
impl Records for EtcdFenceStore {
    async fn get(&self, key: &str) -> Result<Option<Vec<u8>>, StoreError> {
        let key = self.record_key(key);
        let resp = self
            .members
            .call("a record's read", |c| {
                let key = key.clone();
                async move { c.kv_client().get(key, None).await }
            })
            .await?;
        Ok(resp.kvs().first().map(|kv| kv.value().to_vec()))
    }

    async fn scan(&self, prefix: &str) -> Result<Vec<(String, Vec<u8>)>, StoreError> {
        let root = self.record_key("");
        let full = self.record_key(prefix);
        let end = prefix_end(full.as_bytes());
        let mut from = full.into_bytes();
        let mut found = Vec::new();
        loop {
            let resp = self
                .members
                .call("a scan of records", |c| {
                    let (from, end) = (from.clone(), end.clone());
                    async move {
                        let options = GetOptions::new().with_range(end).with_limit(500);
                        c.kv_client().get(from, Some(options)).await
                    }
                })
                .await?;
            for kv in resp.kvs() {
                let key = String::from_utf8_lossy(&kv.key()[root.len()..]).into_owned();
                found.push((key, kv.value().to_vec()));
            }
            match resp.kvs().last() {
                Some(last) if resp.more() => {
                    from = last.key().to_vec();
                    from.push(0);
                }
                _ => return Ok(found),
            }
        }
    }

    async fn put(&self, key: &str, value: Vec<u8>, when: When<'_>) -> Result<bool, StoreError> {
        let full = self.record_key(key);
        let compares = match when {
            When::Always => Vec::new(),
            When::Absent => vec![Compare::version(full.clone(), CompareOp::Equal, 0)],
            When::Exists(other) => vec![Compare::version(
                self.record_key(other),
                CompareOp::Greater,
                0,
            )],
        };
        let resp = self
            .members
            .call("a record's write", |c| {
                let txn = Txn::new().when(compares.clone()).and_then([TxnOp::put(
                    full.clone(),
                    value.clone(),
                    None,
                )]);
                async move { c.kv_client().txn(txn).await }
            })
            .await?;
        Ok(resp.succeeded())
    }

    async fn remove(&self, key: &str, and_under: Option<&str>) -> Result<bool, StoreError> {
        let full = self.record_key(key);
        let mut ops = vec![TxnOp::delete(full.clone(), None)];
        if let Some(prefix) = and_under {
            let under = self.record_key(prefix);
            let end = prefix_end(under.as_bytes());
            ops.push(TxnOp::delete(
                under,
                Some(DeleteOptions::new().with_range(end)),
            ));
        }
        let resp = self
            .members
            .call("a record's removal", |c| {
                let txn = Txn::new()
                    .when([Compare::version(full.clone(), CompareOp::Greater, 0)])
                    .and_then(ops.clone());
                async move { c.kv_client().txn(txn).await }
            })
            .await?;
        Ok(resp.succeeded())
    }

    async fn swap(&self, swap: Swap) -> Result<bool, StoreError> {
        let compares: Vec<Compare> = swap
            .expect
            .iter()
            .map(|(key, expect)| {
                let key = self.record_key(key);
                match expect {
                    Expect::Absent => Compare::version(key, CompareOp::Equal, 0),
                    Expect::Present => Compare::version(key, CompareOp::Greater, 0),
                    Expect::Bytes(b) => Compare::value(key, CompareOp::Equal, b.clone()),
                }
            })
            .collect();
        let mut ops = Vec::new();
        if let Some(prefix) = &swap.remove_under {
            let under = self.record_key(prefix);
            let end = prefix_end(under.as_bytes());
            ops.push(TxnOp::delete(
                under,
                Some(DeleteOptions::new().with_range(end)),
            ));
        }
        for (key, value) in &swap.set {
            let key = self.record_key(key);
            ops.push(match value {
                Some(v) => TxnOp::put(key, v.clone(), None),
                None => TxnOp::delete(key, None),
            });
        }
        let resp = self
            .members
            .call("a swap of records", |c| {
                let txn = Txn::new().when(compares.clone()).and_then(ops.clone());
                async move { c.kv_client().txn(txn).await }
            })
            .await?;
        Ok(resp.succeeded())
    }
}
