//! Per-scope locks. Only the commit point holds one, so writers to different scopes never wait
//! for each other, and a slow upload (still streaming) holds nothing. Entries are removed when
//! the last holder or waiter lets go, so the table stays as large as the current contention.

use parking_lot::Mutex;
use std::collections::HashMap;
use std::sync::Arc;
use tokio::sync::{Mutex as AsyncMutex, OwnedMutexGuard};

const SHARDS: usize = 64;

type Slot = Arc<AsyncMutex<()>>;

pub struct ScopeLocks {
    shards: Vec<Mutex<HashMap<String, Slot>>>,
}

impl Default for ScopeLocks {
    fn default() -> Self {
        ScopeLocks {
            shards: (0..SHARDS).map(|_| Mutex::new(HashMap::new())).collect(),
        }
    }
}

/// Holds one scope's lock until dropped.
pub struct ScopeGuard<'a> {
    locks: &'a ScopeLocks,
    key: String,
    guard: Option<OwnedMutexGuard<()>>,
    /// Whether another holder had it when it was asked for.
    waited: bool,
}

impl ScopeGuard<'_> {
    /// Whether this lock was taken after another holder let go (which may have changed what
    /// the scope's rows held before).
    pub fn waited(&self) -> bool {
        self.waited
    }
}

impl ScopeLocks {
    fn shard(&self, key: &str) -> &Mutex<HashMap<String, Slot>> {
        use std::hash::BuildHasher;
        let h =
            std::hash::BuildHasherDefault::<std::collections::hash_map::DefaultHasher>::default()
                .hash_one(key);
        &self.shards[(h as usize) % SHARDS]
    }

    pub async fn lock(&self, key: &str) -> ScopeGuard<'_> {
        let slot = self
            .shard(key)
            .lock()
            .entry(key.to_string())
            .or_default()
            .clone();
        let (guard, waited) = match slot.clone().try_lock_owned() {
            Ok(guard) => (guard, false),
            Err(_) => (slot.lock_owned().await, true),
        };
        ScopeGuard {
            locks: self,
            key: key.to_string(),
            guard: Some(guard),
            waited,
        }
    }

    /// Locks a scope and, when the scope is wider than the object (`object_key` differs),
    /// the object's own row too, always in that order.
    pub async fn lock_object(
        &self,
        scope: &str,
        object_key: &str,
    ) -> (ScopeGuard<'_>, Option<ScopeGuard<'_>>) {
        let scope_lock = self.lock(scope).await;
        let object_lock = if object_key != scope {
            Some(self.lock(object_key).await)
        } else {
            None
        };
        (scope_lock, object_lock)
    }

    /// How many scopes have a holder or a waiter right now.
    pub fn active(&self) -> usize {
        self.shards.iter().map(|s| s.lock().len()).sum()
    }
}

impl Drop for ScopeGuard<'_> {
    fn drop(&mut self) {
        self.guard.take();
        let mut shard = self.locks.shard(&self.key).lock();
        // Only the map's own reference left: nobody holds or waits for this scope.
        if shard
            .get(&self.key)
            .is_some_and(|s| Arc::strong_count(s) == 1)
        {
            shard.remove(&self.key);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[tokio::test]
    async fn same_scope_excludes_other_scopes_do_not() {
        let locks = Arc::new(ScopeLocks::default());
        let a = locks.lock("object:b/a").await;
        // Another scope is free while `a` is held.
        let b = tokio::time::timeout(Duration::from_secs(1), locks.lock("object:b/b")).await;
        assert!(b.is_ok());
        drop(b);
        // The same scope waits.
        let again = tokio::time::timeout(Duration::from_millis(50), locks.lock("object:b/a")).await;
        assert!(again.is_err());
        drop(a);
        let again = tokio::time::timeout(Duration::from_secs(1), locks.lock("object:b/a")).await;
        assert!(again.is_ok());
        drop(again);
        assert_eq!(locks.active(), 0);
    }
}
