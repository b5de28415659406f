//! One backend conformance suite, run against `fs`, `s3` (a real moto server, with
//! `unsafe_no_conditional_writes`, and a real ministack in the safe mode) and `azure` (a real
//! Azurite, written around fencegate with Azure's own Python SDK) and `gcs` (the scripted GCS
//! double, tests/common/gcs_fake, written around fencegate directly): every contract line of docs/design.md
//! the foundation proved, through the real binary. Each test body is written once and
//! instantiated per backend at the bottom of the file.

use crate::common;
use common::azurite::Azurite;
use common::gcs_fake::GcsFake;
use common::store::{Store, StoreKind};
use common::{client, get_bytes, put, Server};
use std::path::PathBuf;
use std::time::{Duration, Instant};

const STORE_BUCKET: &str = "fencegate-conformance";
/// The smallest multipart threshold (5 MiB), so a slow upload is multipart on s3.
const THRESHOLD: usize = 5 * 1024 * 1024;

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Kind {
    Fs,
    /// The s3 backend on moto, with `unsafe_no_conditional_writes`.
    S3,
    /// The s3 backend on ministack, without any opt-in: conditional commits.
    S3Safe,
    /// The azure backend on Azurite.
    Azure,
    /// The gcs backend on the scripted GCS double (no emulator honours generation
    /// preconditions).
    Gcs,
}

impl Kind {
    fn store(self) -> Option<StoreKind> {
        match self {
            Kind::Fs | Kind::Azure | Kind::Gcs => None,
            Kind::S3 => Some(StoreKind::Moto),
            Kind::S3Safe => Some(StoreKind::Ministack),
        }
    }
}

struct Fx {
    kind: Kind,
    _dir: tempfile::TempDir,
    data: PathBuf,
    config: String,
    store: Option<Store>,
    azurite: Option<Azurite>,
    gcs: Option<GcsFake>,
    server: Option<Server>,
}

impl Fx {
    async fn start(kind: Kind) -> Fx {
        let dir = tempfile::tempdir().unwrap();
        let data = dir.path().join("data");
        let mut azurite = None;
        let mut gcs = None;
        let (store, config) = match kind.store() {
            None if kind == Kind::Gcs => {
                let fake = GcsFake::start().await;
                fake.create_bucket(STORE_BUCKET);
                std::fs::create_dir_all(dir.path()).unwrap();
                let key = fake.write_service_account(dir.path());
                let config = format!(
                    "[backends.store]\nkind = \"gcs\"\ncredentials_file = \"{}\"\nendpoint = \"{}\"\nblock_size_bytes = {THRESHOLD}\n\n[buckets.default]\nbackend = \"store\"\nbackend_bucket = \"{STORE_BUCKET}\"\nbackend_prefix = \"tenant-a/\"\n",
                    key.display(),
                    fake.url()
                );
                gcs = Some(fake);
                (None, config)
            }
            None if kind == Kind::Azure => {
                let az = Azurite::start();
                az.create_container(STORE_BUCKET);
                let config = format!(
                    "[backends.store]\nkind = \"azure\"\naccount = \"{}\"\naccess_key = \"{}\"\nendpoint = \"{}\"\nblock_size_bytes = {THRESHOLD}\n\n[buckets.default]\nbackend = \"store\"\nbackend_bucket = \"{STORE_BUCKET}\"\nbackend_prefix = \"tenant-a/\"\n",
                    az.account(),
                    az.key(),
                    az.endpoint()
                );
                azurite = Some(az);
                (None, config)
            }
            None => (None, String::new()),
            Some(store_kind) => {
                let store = Store::start(store_kind);
                store.create_bucket(STORE_BUCKET).await;
                // The opt-in on moto only: it ignores If-Match on CompleteMultipartUpload, so
                // the start-up probe refuses it otherwise (tests/it/s3/backend.rs proves that).
                let config = format!(
                    "[backends.store]\nkind = \"s3\"\nendpoint = \"{}\"\naccess_key_id = \"test\"\nsecret_access_key = \"test\"\nmultipart_threshold_bytes = {THRESHOLD}\n{}\n\n[buckets.default]\nbackend = \"store\"\nbackend_bucket = \"{STORE_BUCKET}\"\nbackend_prefix = \"tenant-a/\"\n",
                    store.endpoint(),
                    store_kind.opt_in()
                );
                (Some(store), config)
            }
        };
        let mut fx = Fx {
            kind,
            _dir: dir,
            data,
            config,
            store,
            azurite,
            gcs,
            server: None,
        };
        fx.boot();
        fx
    }

    fn boot(&mut self) {
        let config = (!self.config.is_empty()).then_some(self.config.as_str());
        let server = Server::start(&self.data, config);
        if self.kind == Kind::S3Safe {
            common::store::assert_safe_mode(&server);
        }
        self.server = Some(server);
    }

    fn az(&self) -> &Azurite {
        self.azurite.as_ref().unwrap()
    }

    fn gcs(&self) -> &GcsFake {
        self.gcs.as_ref().unwrap()
    }

    fn s(&self) -> &Server {
        self.server.as_ref().unwrap()
    }

    fn url(&self, key: &str) -> String {
        self.s().object_url("default", key)
    }

    /// `fencegate fences rebuild --bucket default`, offline, on this fixture's data and
    /// configuration.
    fn rebuild(&self) -> std::process::Output {
        let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_fencegate"));
        cmd.args(["fences", "rebuild", "--bucket", "default", "--data-dir"])
            .arg(&self.data);
        if !self.config.is_empty() {
            cmd.arg("--config").arg(self.data.with_extension("toml"));
        }
        cmd.output().unwrap()
    }

    fn kill9_and_restart(&mut self) {
        self.server.take().unwrap().kill9();
        self.boot();
    }

    /// Writes the object the way a client going around fencegate would.
    async fn write_behind(&self, key: &str, body: &'static [u8]) {
        match self.kind {
            Kind::Azure => self
                .az()
                .put_behind(STORE_BUCKET, &format!("tenant-a/{key}"), body),
            Kind::Gcs => {
                self.gcs()
                    .put_direct(STORE_BUCKET, &format!("tenant-a/{key}"), body, &[]);
            }
            Kind::Fs => {
                std::fs::write(self.data.join(format!("objects/default/{key}.o")), body).unwrap()
            }
            Kind::S3 | Kind::S3Safe => {
                let c = self.store.as_ref().unwrap().client();
                c.put_object()
                    .bucket(STORE_BUCKET)
                    .key(format!("tenant-a/{key}"))
                    .body(aws_sdk_s3::primitives::ByteStream::from_static(body))
                    .send()
                    .await
                    .unwrap();
            }
        }
    }

    /// The object's bytes as the backend holds them, read around fencegate.
    async fn read_behind(&self, key: &str) -> Vec<u8> {
        match self.kind {
            Kind::Azure => self
                .az()
                .get_behind(STORE_BUCKET, &format!("tenant-a/{key}"))
                .unwrap(),
            Kind::Gcs => self
                .gcs()
                .get_direct(STORE_BUCKET, &format!("tenant-a/{key}"))
                .unwrap()
                .0
                .to_vec(),
            Kind::Fs => std::fs::read(self.data.join(format!("objects/default/{key}.o"))).unwrap(),
            Kind::S3 | Kind::S3Safe => {
                let c = self.store.as_ref().unwrap().client();
                let out = c
                    .get_object()
                    .bucket(STORE_BUCKET)
                    .key(format!("tenant-a/{key}"))
                    .send()
                    .await
                    .unwrap();
                out.body.collect().await.unwrap().into_bytes().to_vec()
            }
        }
    }

    /// Bodies staged but never committed: temporary files, or open multipart uploads.
    async fn staged_leftovers(&self) -> usize {
        match self.kind {
            // Staging blobs, those that hold only uncommitted blocks so far included.
            Kind::Azure => self
                .az()
                .list_staged_behind(STORE_BUCKET, "tenant-a/.fencegate-probe/staging/")
                .len(),
            Kind::Gcs => self
                .gcs()
                .list_direct(STORE_BUCKET, "tenant-a/.fencegate-probe/staging/")
                .len(),
            Kind::Fs => common::files_below(&self.data.join("objects/.staging")).len(),
            Kind::S3 | Kind::S3Safe => {
                let c = self.store.as_ref().unwrap().client();
                let out = c
                    .list_multipart_uploads()
                    .bucket(STORE_BUCKET)
                    .send()
                    .await
                    .unwrap();
                out.uploads().len()
            }
        }
    }
}

async fn fence(c: &reqwest::Client, fx: &Fx, key: &str) -> serde_json::Value {
    common::fence(c, fx.s(), "default", key).await
}

/// Contract line 1 under concurrency: no write invoked after a higher token was acknowledged
/// is accepted, and the final object was written by the highest accepted token.
async fn ordering_under_concurrency(kind: Kind) {
    use rand::{Rng, SeedableRng};
    let fx = Fx::start(kind).await;
    let c = client();
    let url = fx.url("hot");
    let epoch = Instant::now();
    let mut rng = rand::rngs::StdRng::seed_from_u64(7);
    let mut tasks = Vec::new();
    for w in 0..16 {
        let tokens: Vec<u64> = (0..6).map(|_| rng.random_range(1..60)).collect();
        let (c, url) = (c.clone(), url.clone());
        tasks.push(tokio::spawn(async move {
            let mut ops = Vec::new();
            for t in tokens {
                let start = epoch.elapsed();
                let resp = c
                    .put(&url)
                    .header("Fencing-Token", t.to_string())
                    .body(format!("w{w} t{t}"))
                    .send()
                    .await
                    .unwrap();
                let status = resp.status().as_u16();
                ops.push((start, epoch.elapsed(), t, status));
            }
            ops
        }));
    }
    let mut ops = Vec::new();
    for t in tasks {
        ops.extend(t.await.unwrap());
    }
    for &(_, _, _, status) in &ops {
        assert!(status == 200 || status == 409, "status {status}");
    }
    let acked: Vec<_> = ops.iter().filter(|o| o.3 == 200).collect();
    for a in &acked {
        for b in &acked {
            assert!(
                !(b.0 > a.1 && b.2 < a.2),
                "token {} accepted after {} was acknowledged",
                b.2,
                a.2
            );
        }
    }
    let max = acked.iter().map(|o| o.2).max().unwrap();
    let resp = c.get(&url).send().await.unwrap();
    assert_eq!(
        resp.headers()["fencing-token"].to_str().unwrap(),
        max.to_string()
    );
    let body = resp.text().await.unwrap();
    assert!(body.ends_with(&format!(" t{max}")), "{body}");
    assert_eq!(fence(&c, &fx, "hot").await["highest"], max);
}

/// The slow zombie: an upload in flight (a multipart upload on s3) is overtaken by a newer
/// token; it fails at its commit, leaves B's bytes, and leaves nothing staged.
async fn slow_zombie(kind: Kind) {
    let fx = Fx::start(kind).await;
    let c = client();
    let url = fx.url("shared.bin");
    let (tx, mut rx) = tokio::sync::mpsc::channel::<Vec<u8>>(1);
    let body = futures::StreamExt::map(
        futures::stream::poll_fn(move |cx| rx.poll_recv(cx)),
        Ok::<Vec<u8>, std::io::Error>,
    );
    let a = {
        let (c, url) = (c.clone(), url.clone());
        tokio::spawn(async move {
            c.put(&url)
                .header("Fencing-Token", "33")
                .body(reqwest::Body::wrap_stream(body))
                .send()
                .await
                .unwrap()
        })
    };
    // More than one part's worth: on s3 the upload is multipart and its first part is up.
    tx.send(vec![b'A'; THRESHOLD + 1024]).await.unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    while fx.staged_leftovers().await == 0 {
        assert!(
            Instant::now() < deadline,
            "A's upload never started staging"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(
        get_bytes(&c, &url).await.0,
        404,
        "A is invisible while in flight"
    );
    let b = tokio::time::timeout(
        Duration::from_secs(20),
        put(&c, &url, Some("34"), b"B wins"),
    )
    .await
    .expect("B is not blocked by A's upload");
    assert_eq!(b.0, 200, "{}", b.1);
    tx.send(vec![b'A'; 1024]).await.unwrap();
    drop(tx);
    let resp = a.await.unwrap();
    assert_eq!(resp.status().as_u16(), 409);
    assert_eq!(resp.headers()["fencing-token-highest"], "34");
    assert_eq!(get_bytes(&c, &url).await.1, b"B wins");
    assert_eq!(
        fx.staged_leftovers().await,
        0,
        "A's staged body was removed"
    );
}

async fn tombstones(kind: Kind) {
    let fx = Fx::start(kind).await;
    let c = client();
    let url = fx.url("doc");
    assert_eq!(put(&c, &url, Some("30"), b"v").await.0, 200);
    assert_eq!(
        c.delete(&url)
            .header("Fencing-Token", "34")
            .send()
            .await
            .unwrap()
            .status()
            .as_u16(),
        200
    );
    assert_eq!(get_bytes(&c, &url).await.0, 404);
    let f = fence(&c, &fx, "doc").await;
    assert_eq!(
        (f["highest"].as_u64(), f["tombstone"].as_bool()),
        (Some(34), Some(true))
    );
    assert_eq!(put(&c, &url, Some("33"), b"zombie").await.0, 409);
    assert_eq!(
        get_bytes(&c, &url).await.0,
        404,
        "the zombie did not re-create it"
    );
    assert_eq!(
        c.delete(&url)
            .header("Fencing-Token", "33")
            .send()
            .await
            .unwrap()
            .status()
            .as_u16(),
        409
    );
    assert_eq!(put(&c, &url, Some("34"), b"again").await.0, 200);
    assert_eq!(get_bytes(&c, &url).await.1, b"again");
}

async fn bypass_is_detected(kind: Kind) {
    let fx = Fx::start(kind).await;
    let c = client();
    let url = fx.url("doc");
    assert_eq!(put(&c, &url, Some("1"), b"through fencegate").await.0, 200);
    fx.write_behind("doc", b"around fencegate").await;
    let (status, body) = put(&c, &url, Some("2"), b"would clobber").await;
    assert_eq!(
        (status, body["error"].as_str()),
        (409, Some("BypassDetected")),
        "{body}"
    );
    assert_eq!(
        fx.read_behind("doc").await,
        b"around fencegate",
        "not overwritten"
    );
    assert_eq!(
        fence(&c, &fx, "doc").await["highest"],
        1,
        "a refused write records nothing"
    );
    // A key fencegate never wrote, created around it, is caught as well.
    fx.write_behind("planted", b"planted").await;
    assert_eq!(put(&c, &fx.url("planted"), Some("1"), b"x").await.0, 409);
    // A key fencegate wrote and deleted, then written around it: known to fencegate, so the
    // refusal does not call it unrecorded, nor advise the rebuild that would adopt it.
    assert_eq!(put(&c, &fx.url("gone"), Some("3"), b"v").await.0, 200);
    let deleted = c
        .delete(fx.url("gone"))
        .header("Fencing-Token", "3")
        .send()
        .await
        .unwrap();
    assert!(deleted.status().is_success());
    fx.write_behind("gone", b"around fencegate").await;
    let (status, body) = put(&c, &fx.url("gone"), Some("4"), b"x").await;
    assert_eq!(status, 409, "{body}");
    let message = body["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("behind fencegate's back") && !message.contains("fences rebuild"),
        "{body}"
    );
    assert_eq!(fx.staged_leftovers().await, 0);
}

async fn error_table(kind: Kind) {
    let fx = Fx::start(kind).await;
    let c = client();
    let url = fx.url("k");
    let row = |v: &(u16, serde_json::Value)| (v.0, v.1["error"].as_str().map(str::to_string));
    let code = |s: u16, c: &str| (s, Some(c.to_string()));
    assert_eq!(
        row(&put(&c, &url, None, b"x").await),
        code(428, "FencingTokenRequired")
    );
    assert_eq!(
        row(&put(&c, &url, Some("0x10"), b"x").await),
        code(400, "InvalidFencingToken")
    );
    assert_eq!(
        row(&put(&c, &url, Some("18446744073709551616"), b"x").await),
        code(400, "InvalidFencingToken")
    );
    assert_eq!(
        row(&put(&c, &fx.s().object_url("nope", "k"), Some("1"), b"x").await),
        code(404, "NoSuchBucket")
    );
    assert_eq!(get_bytes(&c, &url).await.0, 404);
    assert_eq!(put(&c, &url, Some("5"), b"v").await.0, 200);
    assert_eq!(
        row(&put(&c, &url, Some("4"), b"x").await),
        code(409, "StaleFencingToken")
    );
    let resp = c
        .put(&url)
        .header("Fencing-Token", "5")
        .header("If-None-Match", "*")
        .body("x")
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status().as_u16(), 412);
    let etag = c.head(&url).send().await.unwrap().headers()["etag"].clone();
    let resp = c
        .put(&url)
        .header("Fencing-Token", "5")
        .header("If-Match", etag)
        .body("v2")
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status().as_u16(), 200);
    let resp = c
        .put(&url)
        .header("Fencing-Token", "6")
        .header("If-Match", "\"0000\"")
        .body("x")
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status().as_u16(), 412);
    assert_eq!(
        fence(&c, &fx, "k").await["highest"],
        5,
        "refused writes recorded nothing"
    );
    assert_eq!(get_bytes(&c, &url).await.1, b"v2");
    // Metadata and the token travel with the object.
    let resp = c
        .put(fx.url("meta"))
        .header("Fencing-Token", "9")
        .header("Content-Type", "text/csv")
        .header("x-amz-meta-owner", "job-7")
        .body("a,b")
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status().as_u16(), 200);
    let head = c.head(fx.url("meta")).send().await.unwrap();
    assert_eq!(head.headers()["content-type"], "text/csv");
    assert_eq!(head.headers()["x-amz-meta-owner"], "job-7");
    assert_eq!(head.headers()["fencing-token"], "9");
}

async fn kill9_and_restart(kind: Kind) {
    let mut fx = Fx::start(kind).await;
    let c = client();
    assert_eq!(put(&c, &fx.url("a"), Some("100"), b"acked").await.0, 200);
    assert_eq!(
        c.post(fx.s().url("/v1/fences/default/b"))
            .header("Fencing-Token", "200")
            .send()
            .await
            .unwrap()
            .status()
            .as_u16(),
        200
    );
    fx.kill9_and_restart();
    assert_eq!(put(&c, &fx.url("a"), Some("99"), b"late").await.0, 409);
    assert_eq!(put(&c, &fx.url("b"), Some("199"), b"late").await.0, 409);
    assert_eq!(get_bytes(&c, &fx.url("a")).await.1, b"acked");
    assert_eq!(put(&c, &fx.url("a"), Some("100"), b"next").await.0, 200);
}

/// An operator who lost the data directory rebuilds the fence table from the objects.
async fn rebuild_after_losing_the_table(kind: Kind) {
    let mut fx = Fx::start(kind).await;
    let c = client();
    for (key, token) in [("x/1", "10"), ("x/2", "12"), ("y", "7")] {
        assert_eq!(put(&c, &fx.url(key), Some(token), b"v").await.0, 200);
    }
    fx.server.take().unwrap().kill9();
    std::fs::remove_dir_all(fx.data.join("fences")).unwrap();
    let out = fx.rebuild();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("3 objects"), "{stdout}");
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("scanned 3 objects"),
        "progress is shown"
    );
    fx.boot();
    assert_eq!(put(&c, &fx.url("x/2"), Some("11"), b"stale").await.0, 409);
    assert_eq!(put(&c, &fx.url("y"), Some("6"), b"stale").await.0, 409);
    // Rebuilt rows know the objects' versions: a current holder's write is not a "bypass".
    assert_eq!(put(&c, &fx.url("x/1"), Some("10"), b"next").await.0, 200);
}

/// An existing bucket moved behind fencegate: its objects are frozen (409) until the one
/// documented step, `fences rebuild`, whose command the refusal names; after it they take
/// writes, and a later write around fencegate is still caught.
async fn moving_an_existing_bucket_behind_fencegate(kind: Kind) {
    let mut fx = Fx::start(kind).await;
    let c = client();
    // Objects fencegate has no record of: as in a bucket that predates it. An s3 store holds
    // any client's objects; an fs bucket's directory holds fencegate's own object files, so
    // there they come from an earlier fencegate whose table this one does not have.
    if kind == Kind::Fs {
        for key in ["legacy", "older"] {
            assert_eq!(
                put(&c, &fx.url(key), Some("3"), b"from before").await.0,
                200
            );
        }
        fx.server.take().unwrap().kill9();
        std::fs::remove_dir_all(fx.data.join("fences")).unwrap();
        fx.boot();
    } else {
        fx.write_behind("legacy", b"from before").await;
        fx.write_behind("older", b"from before too").await;
    }
    let (status, body) = put(&c, &fx.url("legacy"), Some("1"), b"new").await;
    assert_eq!(status, 409, "{body}");
    let message = body["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("fencegate fences rebuild --bucket default")
            && message.contains("Moving an existing bucket behind fencegate"),
        "the refusal says what to do: {body}"
    );
    fx.server.take().unwrap().kill9();
    let out = fx.rebuild();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    fx.boot();
    // Tokens found on the objects were recorded (3 on fs), so the writer's next one is above.
    assert_eq!(
        put(&c, &fx.url("legacy"), Some("2"), b"stale").await.0,
        if kind == Kind::Fs { 409 } else { 200 }
    );
    assert_eq!(put(&c, &fx.url("legacy"), Some("5"), b"new").await.0, 200);
    assert_eq!(get_bytes(&c, &fx.url("legacy")).await.1, b"new");
    // A write around fencegate after the move is still detected.
    fx.write_behind("older", b"around fencegate").await;
    let (status, body) = put(&c, &fx.url("older"), Some("6"), b"would clobber").await;
    assert_eq!(
        (status, body["error"].as_str()),
        (409, Some("BypassDetected")),
        "{body}"
    );
}

macro_rules! on_both_backends {
    ($($name:ident),* $(,)?) => {
        mod fs {
            $(#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $name() { super::$name(super::Kind::Fs).await })*
        }
        mod s3 {
            $(#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $name() { super::$name(super::Kind::S3).await })*
        }
        mod s3_safe {
            $(#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $name() { super::$name(super::Kind::S3Safe).await })*
        }
        mod azure {
            $(#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $name() { super::$name(super::Kind::Azure).await })*
        }
        mod gcs {
            $(#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $name() { super::$name(super::Kind::Gcs).await })*
        }
    };
}

on_both_backends!(
    ordering_under_concurrency,
    slow_zombie,
    tombstones,
    bypass_is_detected,
    error_table,
    kill9_and_restart,
    rebuild_after_losing_the_table,
    moving_an_existing_bucket_behind_fencegate,
);
