//! `GET /admin/status`: one instance at a glance, as `fencegate status` prints it (the way
//! `etcdctl endpoint status` and `garage status` answer): version, uptime, mode, the fence
//! table and its size, each bucket's backend, leases held, every readiness check with its
//! error, and on a shared table each etcd member's own status. fencegate instances share only
//! the table, so the members listed are etcd's; an instance knows no other instance.
//!
//! Behind admin authentication, so the checks' errors (which name paths and stores) are shown.

use super::AppState;
use crate::fence::{Member, Usage};
use crate::health::Check;
use axum::extract::State;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// What an instance knows of itself from start-up, for its status.
#[derive(Debug, Clone)]
pub struct About {
    pub started_at_ms: u64,
    /// No keys configured: anonymous requests from loopback are accepted.
    pub development: bool,
    /// `rocksdb` or `etcd`.
    pub fence_store: &'static str,
    /// rocksdb: the table's directory; etcd: the endpoints.
    pub fence_store_at: String,
    /// Each configured backend's kind (`fs` or `s3`), by name.
    pub backend_kinds: BTreeMap<String, &'static str>,
}

impl About {
    pub fn of(config: &crate::config::Config, started_at_ms: u64) -> About {
        use crate::config::{BackendConfig, FenceStoreKind};
        let (fence_store, fence_store_at) = match config.fence_store.kind {
            FenceStoreKind::Rocksdb => ("rocksdb", config.fence_store_path().display().to_string()),
            FenceStoreKind::Etcd => ("etcd", config.fence_store.endpoints.join(",")),
        };
        let backend_kinds = config
            .backends
            .iter()
            .map(|(name, b)| {
                let kind = match b {
                    BackendConfig::Fs { .. } => "fs",
                    BackendConfig::S3(_) => "s3",
                    BackendConfig::Azure(_) => "azure",
                    BackendConfig::Gcs(_) => "gcs",
                };
                (name.clone(), kind)
            })
            .collect();
        About {
            started_at_ms,
            development: config.keys.is_empty(),
            fence_store,
            fence_store_at,
            backend_kinds,
        }
    }
}

/// The answer of `GET /admin/status`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Status {
    pub version: String,
    pub started_at_ms: u64,
    pub uptime_secs: u64,
    /// `development` (no keys) or `protected`.
    pub mode: String,
    /// Every readiness check passes: what `/readyz` answers 200 for.
    pub ready: bool,
    pub fence_store: FenceStoreStatus,
    pub buckets: Vec<BucketStatus>,
    /// `None` when the lease rows cannot be read now (the fence_table check says why).
    pub leases_held: Option<usize>,
    pub credentials_in_grace: usize,
    pub checks: Vec<Check>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct FenceStoreStatus {
    /// `rocksdb` or `etcd`.
    pub kind: String,
    /// The table's directory, or the etcd endpoints.
    pub at: String,
    /// A local table's rows, as the last scan counted them (every 10 minutes), and its bytes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rows: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bytes_on_disk: Option<u64>,
    /// A shared table's etcd members, each as it answered now.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub members: Vec<Member>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct BucketStatus {
    pub name: String,
    pub backend: String,
    /// `fs` or `s3`.
    pub kind: String,
}

pub(super) async fn status(State(state): State<AppState>) -> Response {
    let gate = &state.gate;
    let store = gate.fence_store();
    let (checks, members) = futures::join!(crate::health::check(gate), store.members());
    let usage: Option<Usage> = store.usage();
    let about = &state.about;
    let mut buckets: Vec<BucketStatus> = gate
        .bucket_backends()
        .into_iter()
        .map(|(name, backend, _)| BucketStatus {
            kind: about
                .backend_kinds
                .get(&backend)
                .copied()
                .unwrap_or("unknown")
                .into(),
            name,
            backend,
        })
        .collect();
    buckets.sort_by(|a, b| a.name.cmp(&b.name));
    let leases_held = state.leases.list().await.ok().map(|l| l.len());
    let now = crate::wall_clock::now_ms();
    Json(Status {
        version: env!("CARGO_PKG_VERSION").into(),
        started_at_ms: about.started_at_ms,
        uptime_secs: now.saturating_sub(about.started_at_ms) / 1000,
        mode: if about.development {
            "development"
        } else {
            "protected"
        }
        .into(),
        ready: checks.iter().all(|c| c.ok),
        fence_store: FenceStoreStatus {
            kind: about.fence_store.into(),
            at: about.fence_store_at.clone(),
            rows: usage.and_then(|_| crate::metrics::fence_table_counted_rows()),
            bytes_on_disk: usage.map(|u| u.bytes_on_disk),
            members,
        },
        buckets,
        leases_held,
        // A status that cannot reach the shared table says so in its checks.
        credentials_in_grace: state
            .leases
            .credentials_in_grace()
            .await
            .map_or(0, |c| c.len()),
        checks,
    })
    .into_response()
}
