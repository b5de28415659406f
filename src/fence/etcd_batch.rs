//! Group commit for the fence table on etcd, as RocksDB's group commit shares WAL syncs: puts
//! made while other puts are in flight are sent together, as one Txn whose operations are the
//! puts' own Txns (nested Txns, etcd 3.3 and later). Each inner Txn keeps its own compares, so
//! a put that meets a changed row fails alone ([`StoreError::Conflict`]) and the others of its
//! batch still apply; the batch costs one round trip and one raft entry instead of one each.
//! A batch never holds two puts of the same row (etcd refuses a key written twice in one Txn),
//! and at most [`MAX_PUTS`] puts, well under etcd's default of 128 operations per Txn. A few
//! batches are in flight at once, so a lone put never waits for another's round trip.

use super::etcd::{io, Members};
use super::StoreError;
use etcd_client::{Compare, Txn, TxnOp, TxnOpResponse};
use std::collections::HashSet;
use std::sync::Arc;
use tokio::sync::{mpsc, oneshot, Mutex};

/// Puts per batch at most: each brings up to two rows, so the inner Txns stay small too.
const MAX_PUTS: usize = 32;

/// Batches in flight at once.
const SENDERS: usize = 4;

/// Bytes of row values per batch at most, well under etcd's default request limit (1.5 MiB):
/// a batch too large would fail every put in it.
const MAX_BYTES: usize = 512 * 1024;

struct Job {
    /// The rows' keys (without the prefix), for batching and for the conflict's message.
    keys: Vec<String>,
    compares: Vec<Compare>,
    ops: Vec<TxnOp>,
    /// The size of the rows' values.
    bytes: usize,
    done: oneshot::Sender<Result<i64, StoreError>>,
}

pub(super) struct Batcher {
    jobs: mpsc::UnboundedSender<Job>,
}

impl Batcher {
    /// Starts the senders; they stop when the batcher is dropped.
    pub fn start(members: Arc<Members>) -> Batcher {
        let (jobs, queue) = mpsc::unbounded_channel();
        let queue = Arc::new(Mutex::new(queue));
        for _ in 0..SENDERS {
            tokio::spawn(send_batches(members.clone(), queue.clone()));
        }
        Batcher { jobs }
    }

    /// Writes `ops` if every one of `compares` holds; returns the revision written.
    pub async fn put(
        &self,
        keys: Vec<String>,
        compares: Vec<Compare>,
        ops: Vec<TxnOp>,
        bytes: usize,
    ) -> Result<i64, StoreError> {
        let (done, answer) = oneshot::channel();
        self.jobs
            .send(Job {
                keys,
                compares,
                ops,
                bytes,
                done,
            })
            .map_err(|_| io("the fence table is closed"))?;
        answer
            .await
            .map_err(|_| io("the fence table's writer stopped"))?
    }
}

async fn send_batches(members: Arc<Members>, queue: Arc<Mutex<mpsc::UnboundedReceiver<Job>>>) {
    let mut carried: Option<Job> = None;
    loop {
        let mut batch = Vec::new();
        let mut keys = HashSet::new();
        let mut bytes = 0;
        if let Some(job) = carried.take() {
            keys.extend(job.keys.iter().cloned());
            bytes += job.bytes;
            batch.push(job);
        }
        // A sender holding a job never waits for the queue: the sender that holds the queue
        // may be waiting for new jobs, which may wait for this one's answer.
        let queue = match batch.is_empty() {
            true => Some(queue.lock().await),
            false => queue.try_lock().ok(),
        };
        if let Some(mut queue) = queue {
            if batch.is_empty() {
                match queue.recv().await {
                    Some(job) => {
                        keys.extend(job.keys.iter().cloned());
                        bytes += job.bytes;
                        batch.push(job);
                    }
                    None => return,
                }
            }
            while batch.len() < MAX_PUTS {
                let Ok(job) = queue.try_recv() else { break };
                if job.keys.iter().any(|k| keys.contains(k)) || bytes + job.bytes > MAX_BYTES {
                    // Another put of a row already in this batch, or one that would make it too
                    // large, goes in the next one.
                    carried = Some(job);
                    break;
                }
                keys.extend(job.keys.iter().cloned());
                bytes += job.bytes;
                batch.push(job);
            }
        }
        send(&members, batch).await;
    }
}

/// One Txn for the whole batch (a lone put is sent as it is), and each put's own answer.
async fn send(members: &Members, batch: Vec<Job>) {
    let inner = |job: &Job| {
        Txn::new()
            .when(job.compares.clone())
            .and_then(job.ops.clone())
    };
    let txn = match batch.as_slice() {
        [one] => inner(one),
        many => Txn::new().and_then(
            many.iter()
                .map(|j| TxnOp::txn(inner(j)))
                .collect::<Vec<_>>(),
        ),
    };
    let started = std::time::Instant::now();
    let answer = members
        .call("a write", |c| {
            let txn = txn.clone();
            async move { c.kv_client().txn(txn).await }
        })
        .await;
    crate::metrics::fence_sync(
        batch.len(),
        started.elapsed(),
        crate::metrics::ETCD_BATCH_PUTS,
    );
    let resp = match answer {
        Ok(resp) => resp,
        Err(e) => {
            for job in batch {
                let _ = job.done.send(Err(e.clone()));
            }
            return;
        }
    };
    let revision = resp.header().map_or(0, |h| h.revision());
    let succeeded: Vec<bool> = if batch.len() == 1 {
        vec![resp.succeeded()]
    } else {
        resp.op_responses()
            .iter()
            .map(|r| matches!(r, TxnOpResponse::Txn(t) if t.succeeded()))
            .collect()
    };
    for (i, job) in batch.into_iter().enumerate() {
        let result = if succeeded.get(i).copied().unwrap_or(false) {
            Ok(revision)
        } else {
            Err(StoreError::Conflict(job.keys.join(", ")))
        };
        let _ = job.done.send(result);
    }
}
