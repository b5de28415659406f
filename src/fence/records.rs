//! Records that several instances share beside the fence table (`[fence_store] kind =
//! "etcd"`): the multipart uploads in progress and their parts (`gate::uploads`), the buckets
//! created through the S3 API (`catalog`), the S3 credentials issued with leases
//! (`lease::credentials`), and the counts of open uploads per key and per bucket that bound
//! them across instances (`gate::uploads_shared`). They are not fence rows: each is opaque bytes under a name, written
//! whole and removed when done, in a key space of its own, so a scan of the fence rows never
//! meets one. A local table has none: one instance keeps these in its data directory.

use super::StoreError;
use async_trait::async_trait;
use parking_lot::Mutex;
use std::collections::BTreeMap;

/// When [`Records::put`] writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum When<'a> {
    /// Whatever is there.
    Always,
    /// Only if nothing is at the key yet: of instances that race, one writes.
    Absent,
    /// Only while the record at this other key exists (a part, while its upload is open).
    Exists(&'a str),
}

/// What a record must still be for a [`Swap`] to be made.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Expect {
    Absent,
    Present,
    /// Exactly these bytes (a count as read).
    Bytes(Vec<u8>),
}

/// Several records changed in one step, only if each record in `expect` is still as read: of
/// instances that race on one record, one swap is made and the others change nothing.
#[derive(Debug, Clone, Default)]
pub struct Swap {
    pub expect: Vec<(String, Expect)>,
    /// The records to write (`Some`) or to remove (`None`).
    pub set: Vec<(String, Option<Vec<u8>>)>,
    /// Every record under this prefix is removed too.
    pub remove_under: Option<String>,
}

#[async_trait]
pub trait Records: Send + Sync + 'static {
    /// The record at `key`. Linearizable: it sees every put and removal acknowledged before.
    async fn get(&self, key: &str) -> Result<Option<Vec<u8>>, StoreError>;
    /// Every record whose key starts with `prefix`, in key order.
    async fn scan(&self, prefix: &str) -> Result<Vec<(String, Vec<u8>)>, StoreError>;
    /// Writes `value` at `key` if `when` holds; false, with nothing written, if it does not.
    async fn put(&self, key: &str, value: Vec<u8>, when: When<'_>) -> Result<bool, StoreError>;
    /// Removes `key`, and with it every record under `and_under`, in one step, if `key`
    /// exists. False if it did not: of instances that race to remove it, one gets true.
    async fn remove(&self, key: &str, and_under: Option<&str>) -> Result<bool, StoreError>;
    /// Makes `swap` if every expectation holds; false, with nothing changed, if one does not.
    async fn swap(&self, swap: Swap) -> Result<bool, StoreError>;
}

/// Records in memory, as etcd keeps them for several gates: unit tests of the shared paths.
#[derive(Default)]
pub struct MemoryRecords {
    map: Mutex<BTreeMap<String, Vec<u8>>>,
}

#[async_trait]
impl Records for MemoryRecords {
    async fn get(&self, key: &str) -> Result<Option<Vec<u8>>, StoreError> {
        Ok(self.map.lock().get(key).cloned())
    }

    async fn scan(&self, prefix: &str) -> Result<Vec<(String, Vec<u8>)>, StoreError> {
        Ok(self
            .map
            .lock()
            .range(prefix.to_string()..)
            .take_while(|(k, _)| k.starts_with(prefix))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect())
    }

    async fn put(&self, key: &str, value: Vec<u8>, when: When<'_>) -> Result<bool, StoreError> {
        let mut map = self.map.lock();
        let holds = match when {
            When::Always => true,
            When::Absent => !map.contains_key(key),
            When::Exists(other) => map.contains_key(other),
        };
        if holds {
            map.insert(key.to_string(), value);
        }
        Ok(holds)
    }

    async fn remove(&self, key: &str, and_under: Option<&str>) -> Result<bool, StoreError> {
        let mut map = self.map.lock();
        if map.remove(key).is_none() {
            return Ok(false);
        }
        if let Some(prefix) = and_under {
            map.retain(|k, _| !k.starts_with(prefix));
        }
        Ok(true)
    }

    async fn swap(&self, swap: Swap) -> Result<bool, StoreError> {
        let mut map = self.map.lock();
        let holds = swap
            .expect
            .iter()
            .all(|(key, expect)| match (expect, map.get(key)) {
                (Expect::Absent, found) => found.is_none(),
                (Expect::Present, found) => found.is_some(),
                (Expect::Bytes(want), found) => found == Some(want),
            });
        if !holds {
            return Ok(false);
        }
        if let Some(prefix) = &swap.remove_under {
            map.retain(|k, _| !k.starts_with(prefix.as_str()));
        }
        for (key, value) in swap.set {
            match value {
                Some(v) => map.insert(key, v),
                None => map.remove(&key),
            };
        }
        Ok(true)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn conditions_and_removal_under_a_prefix() {
        let r = MemoryRecords::default();
        assert!(!r
            .put("p:1/1", b"x".to_vec(), When::Exists("u:1"))
            .await
            .unwrap());
        assert!(r.put("u:1", b"u".to_vec(), When::Absent).await.unwrap());
        assert!(!r.put("u:1", b"v".to_vec(), When::Absent).await.unwrap());
        assert!(r
            .put("p:1/1", b"x".to_vec(), When::Exists("u:1"))
            .await
            .unwrap());
        assert!(r.put("p:10/1", b"y".to_vec(), When::Always).await.unwrap());
        assert_eq!(r.scan("p:1/").await.unwrap().len(), 1);
        assert!(r.remove("u:1", Some("p:1/")).await.unwrap());
        assert!(!r.remove("u:1", Some("p:1/")).await.unwrap());
        assert!(r.get("p:1/1").await.unwrap().is_none());
        assert_eq!(r.get("p:10/1").await.unwrap().as_deref(), Some(&b"y"[..]));
    }

    #[tokio::test]
    async fn a_swap_changes_all_or_nothing() {
        let r = MemoryRecords::default();
        let swap = |expect: Vec<(&str, Expect)>| Swap {
            expect: expect
                .into_iter()
                .map(|(k, e)| (k.to_string(), e))
                .collect(),
            set: vec![("n".into(), Some(b"2".to_vec())), ("u".into(), None)],
            remove_under: Some("p/".into()),
        };
        r.put("u", b"u".to_vec(), When::Always).await.unwrap();
        r.put("p/1", b"x".to_vec(), When::Always).await.unwrap();
        let stale = swap(vec![
            ("u", Expect::Present),
            ("n", Expect::Bytes(b"1".to_vec())),
        ]);
        assert!(!r.swap(stale).await.unwrap());
        assert!(r.get("u").await.unwrap().is_some());
        assert!(r.get("p/1").await.unwrap().is_some());
        let fresh = swap(vec![("u", Expect::Present), ("n", Expect::Absent)]);
        assert!(r.swap(fresh).await.unwrap());
        assert_eq!(r.get("n").await.unwrap().as_deref(), Some(&b"2"[..]));
        assert!(r.get("u").await.unwrap().is_none());
        assert!(r.scan("p/").await.unwrap().is_empty());
    }
}
