//! A scripted in-process double of Google Cloud Storage's **XML API** (path style
//! `/{bucket}/{object}`) and of Google's OAuth token endpoint, for the gcs backend's tests:
//! no installable GCS emulator honours generation preconditions throughout (delete, compose,
//! signed URLs; docs/notes/gcs-groundwork.md §1), so this one does, under one lock.
//!
//! This module owns the public API (`GcsFake`, its knobs and its direct access) and the
//! state. `ops` owns the routing and the object operations (upload, compose, read, delete);
//! `auth` the service account, the JWT grant, bearer tokens and V4 signature checks; `xml`
//! the XML bodies (errors, compose requests, listings).
// A refusal is the answer itself, sent as it is: no caller looks inside a boxed one.
#![allow(clippy::result_large_err)]

mod auth;
mod json;
mod ops;
mod xml;

// Not every test binary that includes tests/common uses all of them.
#[allow(unused_imports)]
pub use auth::{canonical_request, string_to_sign, verify_v4, Account, V4Error};

use axum::body::Bytes;
use base64::engine::general_purpose::STANDARD as B64;
use base64::Engine;
use md5::Digest;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// The throwaway service account the fake trusts (its `token_uri` is replaced by the fake's).
pub const SA_JSON: &str = include_str!("../../../docs/notes/gcs-vectors/sa.json");

/// One live object (no versioning: a bucket keeps only the live generation of each name).
#[derive(Clone, Debug)]
pub struct Obj {
    pub generation: i64,
    pub metageneration: i64,
    pub data: Bytes,
    /// None for a composite object: GCS keeps no MD5 for those.
    pub md5: Option<[u8; 16]>,
    pub crc32c: u32,
    pub content_type: String,
    /// `x-goog-meta-NAME: VALUE`, NAME lowercased as HTTP headers arrive.
    pub metadata: BTreeMap<String, String>,
    /// Some(n) for a composite object (n components), None for an uploaded one.
    pub component_count: Option<u32>,
    /// By the fake's clock.
    pub updated: SystemTime,
}

impl Obj {
    /// The ETag, quoted: the MD5 in hex, or for a composite an opaque value that is not an MD5.
    pub fn etag(&self) -> String {
        match self.md5 {
            Some(md5) => format!("\"{}\"", hex::encode(md5)),
            None => format!("\"-{}\"", B64.encode(self.generation.to_be_bytes())),
        }
    }

    /// `x-goog-hash` values: `crc32c=<b64>` and, unless composite, `md5=<b64>`.
    pub fn hashes(&self) -> Vec<String> {
        let mut out = vec![format!("crc32c={}", B64.encode(self.crc32c.to_be_bytes()))];
        if let Some(md5) = self.md5 {
            out.push(format!("md5={}", B64.encode(md5)));
        }
        out
    }
}

/// An operation whose preconditions `ignore_conditions` can make the fake ignore.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Op {
    Put,
    Delete,
    Compose,
}

#[derive(Default)]
struct Knobs {
    ignore_put: bool,
    ignore_delete: bool,
    ignore_compose: bool,
    ignore_md5: bool,
    clock_offset: i64,
    token_lifetime: Option<u64>,
    fail_next: u32,
    fail_status: u16,
    /// The next n storage requests wait this long before they are looked at.
    hold_requests: (u32, Duration),
    /// The next n storage requests are carried out, then answered this much later.
    hold_answers: (u32, Duration),
}

#[derive(Default)]
struct Store {
    buckets: BTreeSet<String>,
    objects: BTreeMap<(String, String), Obj>,
    last_generation: i64,
}

impl Store {
    /// Strictly increasing, seeded from the microsecond clock as GCS's generations look.
    fn next_generation(&mut self) -> i64 {
        let micros = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .as_micros() as i64;
        self.last_generation = micros.max(self.last_generation + 1);
        self.last_generation
    }
}

pub(crate) struct Inner {
    store: Mutex<Store>,
    knobs: Mutex<Knobs>,
    /// Bearer token → its expiry by the fake's clock.
    tokens: Mutex<HashMap<String, SystemTime>>,
    counts: Mutex<BTreeMap<(String, &'static str), u64>>,
    account: Account,
    token_uri: String,
}

impl Inner {
    /// Takes one from a hold knob's count: the delay, if this request is held.
    pub(crate) fn take_hold(&self, answers: bool) -> Option<Duration> {
        let mut k = self.knobs.lock().unwrap();
        let hold = if answers {
            &mut k.hold_answers
        } else {
            &mut k.hold_requests
        };
        (hold.0 > 0).then(|| {
            hold.0 -= 1;
            hold.1
        })
    }

    fn now(&self) -> SystemTime {
        let offset = self.knobs.lock().unwrap().clock_offset;
        let now = SystemTime::now();
        if offset >= 0 {
            now + Duration::from_secs(offset as u64)
        } else {
            now - Duration::from_secs(offset.unsigned_abs())
        }
    }
}

/// The fake, serving on its own thread and runtime (a test that blocks its own runtime does
/// not stall it); stopped on drop.
pub struct GcsFake {
    inner: Arc<Inner>,
    pub addr: std::net::SocketAddr,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
}

impl GcsFake {
    pub async fn start() -> GcsFake {
        tokio::task::spawn_blocking(GcsFake::start_blocking)
            .await
            .unwrap()
    }

    pub fn start_blocking() -> GcsFake {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.set_nonblocking(true).unwrap();
        let addr = listener.local_addr().unwrap();
        let token_uri = format!("http://{addr}/token");
        let inner = Arc::new(Inner {
            store: Mutex::default(),
            knobs: Mutex::default(),
            tokens: Mutex::default(),
            counts: Mutex::default(),
            account: Account::from_json(SA_JSON),
            token_uri,
        });
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let app = axum::Router::new()
            .fallback(ops::handle)
            .with_state(inner.clone());
        std::thread::Builder::new()
            .name("gcs-fake".into())
            .spawn(move || {
                let rt = tokio::runtime::Builder::new_multi_thread()
                    .worker_threads(2)
                    .enable_all()
                    .build()
                    .unwrap();
                rt.block_on(async move {
                    let listener = tokio::net::TcpListener::from_std(listener).unwrap();
                    let _ = axum::serve(listener, app)
                        .with_graceful_shutdown(async move {
                            let _ = stopped.await;
                        })
                        .await;
                });
            })
            .unwrap();
        GcsFake {
            inner,
            addr,
            stop: Some(stop),
        }
    }

    /// `http://127.0.0.1:PORT`, the endpoint to give the backend.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    pub fn token_uri(&self) -> String {
        self.inner.token_uri.clone()
    }

    pub fn create_bucket(&self, name: &str) {
        self.inner
            .store
            .lock()
            .unwrap()
            .buckets
            .insert(name.to_string());
    }

    /// sa.json with `token_uri` pointing at this fake's `/token`.
    pub fn service_account_json(&self) -> String {
        let mut sa: serde_json::Value = serde_json::from_str(SA_JSON).unwrap();
        sa["token_uri"] = serde_json::Value::String(self.token_uri());
        serde_json::to_string_pretty(&sa).unwrap()
    }

    /// Writes `service_account_json()` to `dir/gcs-service-account.json`.
    pub fn write_service_account(&self, dir: &Path) -> PathBuf {
        let path = dir.join("gcs-service-account.json");
        std::fs::write(&path, self.service_account_json()).unwrap();
        path
    }

    /// A `[backends.NAME]` table for this fake (its service account written into `dir`), for
    /// a test to add its own options and buckets to.
    pub fn backend_table(&self, name: &str, dir: &Path) -> String {
        format!(
            "[backends.{name}]\nkind = \"gcs\"\ncredentials_file = \"{}\"\nendpoint = \"{}\"\n",
            self.write_service_account(dir).display(),
            self.url()
        )
    }

    /// A bearer token issued without the JWT grant (its lifetime is `token_lifetime`'s).
    pub fn issue_token(&self) -> String {
        auth::issue_token(&self.inner, self.inner.now()).0
    }

    /// The fake's clock: the real one plus `set_clock_offset`.
    pub fn now(&self) -> SystemTime {
        self.inner.now()
    }

    /// The precondition of `op` is accepted and ignored from now on, as weak emulators do.
    pub fn ignore_conditions(&self, op: Op) {
        let mut k = self.inner.knobs.lock().unwrap();
        match op {
            Op::Put => k.ignore_put = true,
            Op::Delete => k.ignore_delete = true,
            Op::Compose => k.ignore_compose = true,
        }
    }

    /// Content-MD5 and `x-goog-hash` on uploads are no longer checked.
    pub fn ignore_md5(&self) {
        self.inner.knobs.lock().unwrap().ignore_md5 = true;
    }

    /// The fake's clock runs `secs` ahead of the real one (behind if negative): signed-URL
    /// expiry, token expiry and every `Date` header follow it.
    pub fn set_clock_offset(&self, secs: i64) {
        self.inner.knobs.lock().unwrap().clock_offset = secs;
    }

    /// Tokens issued from now on live `secs` (`expires_in` says so); 3599 by default.
    pub fn token_lifetime(&self, secs: u64) {
        self.inner.knobs.lock().unwrap().token_lifetime = Some(secs);
    }

    /// The next `n` storage requests (not `/token`) are answered `status` with
    /// `<Code>ServiceUnavailable</Code>` (`InternalError` unless 503), before auth or any
    /// change: a store outage.
    pub fn fail_next(&self, n: u32, status: u16) {
        let mut k = self.inner.knobs.lock().unwrap();
        k.fail_next = n;
        k.fail_status = status;
    }

    /// The next `n` storage requests wait `delay` before the fake looks at them (auth, clock,
    /// conditions): a request held in flight that lands late.
    pub fn hold_requests(&self, n: u32, delay: Duration) {
        self.inner.knobs.lock().unwrap().hold_requests = (n, delay);
    }

    /// The next `n` storage requests are carried out at once and answered only `delay` later:
    /// with a client timeout shorter than `delay`, a change that landed without an answer.
    pub fn hold_answers(&self, n: u32, delay: Duration) {
        self.inner.knobs.lock().unwrap().hold_answers = (n, delay);
    }

    /// Requests received so far with `method` ("PUT", …) of `kind`: "object" (upload, read,
    /// delete), "compose", "list", "bucket" (HEAD or other bucket requests) or "token".
    pub fn requests(&self, method: &str, kind: &str) -> u64 {
        let counts = self.inner.counts.lock().unwrap();
        counts
            .iter()
            .filter(|((m, k), _)| m == method && *k == kind)
            .map(|(_, n)| *n)
            .sum()
    }

    /// Stores an object as an upload would (no auth, no conditions); its generation.
    pub fn put_direct(
        &self,
        bucket: &str,
        key: &str,
        data: impl Into<Bytes>,
        metadata: &[(&str, &str)],
    ) -> i64 {
        let data = data.into();
        let mut store = self.inner.store.lock().unwrap();
        assert!(store.buckets.contains(bucket), "no bucket {bucket:?}");
        let obj = Obj {
            generation: store.next_generation(),
            metageneration: 1,
            md5: Some(md5::Md5::digest(&data).into()),
            crc32c: crc32c(&data),
            data,
            content_type: "application/octet-stream".into(),
            metadata: metadata
                .iter()
                .map(|(k, v)| (k.to_ascii_lowercase(), v.to_string()))
                .collect(),
            component_count: None,
            updated: self.inner.now(),
        };
        let generation = obj.generation;
        store
            .objects
            .insert((bucket.to_string(), key.to_string()), obj);
        generation
    }

    pub fn delete_direct(&self, bucket: &str, key: &str) -> bool {
        let mut store = self.inner.store.lock().unwrap();
        store
            .objects
            .remove(&(bucket.to_string(), key.to_string()))
            .is_some()
    }

    /// The live object's bytes, generation and metadata.
    pub fn get_direct(
        &self,
        bucket: &str,
        key: &str,
    ) -> Option<(Bytes, i64, BTreeMap<String, String>)> {
        self.stat_direct(bucket, key)
            .map(|o| (o.data, o.generation, o.metadata))
    }

    /// The whole live object (hashes, content type, component count, …).
    pub fn stat_direct(&self, bucket: &str, key: &str) -> Option<Obj> {
        let store = self.inner.store.lock().unwrap();
        store
            .objects
            .get(&(bucket.to_string(), key.to_string()))
            .cloned()
    }

    /// Names under `prefix` with their generations, in byte order.
    pub fn list_direct(&self, bucket: &str, prefix: &str) -> Vec<(String, i64)> {
        let store = self.inner.store.lock().unwrap();
        store
            .objects
            .range((bucket.to_string(), prefix.to_string())..)
            .take_while(|((b, k), _)| b == bucket && k.starts_with(prefix))
            .map(|((_, k), o)| (k.clone(), o.generation))
            .collect()
    }
}

impl Drop for GcsFake {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
    }
}

pub fn crc32c(data: &[u8]) -> u32 {
    crc_fast::checksum(crc_fast::CrcAlgorithm::Crc32Iscsi, data) as u32
}
