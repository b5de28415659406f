//! The bounds on what one key may hold open hold for the cluster, not per instance
//! (docs/security.md, "Limits on what a stranger can hold"): open multipart uploads per key
//! and per bucket (`[server] max_uploads_per_key`, `max_uploads_per_bucket`) and live leases per
//! key (`[leases] max_live_per_key`), with creates and grants sent at once through two
//! instances; an upload aborted or completed, and a lease released or expired, through either
//! instance gives its place back to both.

use super::SERIAL;
use crate::common;
use aws_sdk_s3::primitives::ByteStream;
use aws_sdk_s3::types::{CompletedMultipartUpload, CompletedPart};
use common::cluster::Cluster;
use common::sign::{send_json, Creds};
use serde_json::json;
use std::time::Duration;

const ALICE: Creds = Creds {
    key: "alice-key",
    secret: "alice-secret-0123456",
};
const BOB: Creds = Creds {
    key: "bob-key",
    secret: "bob-secret-0123456",
};

/// Both instances with the bounds under test and two keys, restarted to take them.
fn bounded_cluster() -> Cluster {
    let cluster = Cluster::up(2, "ministack");
    let key = |name: &str| {
        format!(
            "\n[keys.{name}]\naccess_key_id = \"{name}-key\"\nsecret_access_key = \"{name}-secret-0123456\"\nbuckets = {{ \"default\" = [\"read\", \"write\", \"delete\", \"lease\"] }}\nlease_names = [\"*\"]\n"
        )
    };
    for n in ["fg1", "fg2"] {
        let file = cluster.dir.path().join(format!("{n}.toml"));
        let text = std::fs::read_to_string(&file)
            .unwrap()
            .replace(
                "[server]\n",
                "[server]\nmax_uploads_per_key = 5\nmax_uploads_per_bucket = 8\n",
            )
            .replace("[leases]\n", "[leases]\nmax_live_per_key = 3\n");
        std::fs::write(&file, text + &key("alice") + &key("bob")).unwrap();
        cluster.signal(n, "TERM");
        cluster.start(n);
    }
    cluster
}

/// `creds`' SDK client on each instance.
fn clients(cluster: &Cluster, creds: Creds) -> [aws_sdk_s3::Client; 2] {
    [1, 2].map(|i| common::moto::client_with(&cluster.url(i, ""), creds.key, creds.secret))
}

/// `n` CreateMultipartUploads at once, alternating between the instances: the upload ids
/// made. Every other answer must be 400 `TooManyUploads`.
async fn creates_at_once(
    s3: &[aws_sdk_s3::Client; 2],
    n: usize,
    tag: &str,
) -> Vec<(String, String)> {
    let creates: Vec<_> = (0..n)
        .map(|i| {
            let (client, key) = (s3[i % 2].clone(), format!("{tag}-{i}"));
            tokio::spawn(async move {
                let made = client
                    .create_multipart_upload()
                    .bucket("default")
                    .key(&key)
                    .metadata("fencing-token", "1")
                    .send()
                    .await;
                (key, made)
            })
        })
        .collect();
    let mut made = Vec::new();
    for c in creates {
        match c.await.unwrap() {
            (key, Ok(out)) => made.push((key, out.upload_id().unwrap().to_string())),
            (_, Err(e)) => {
                let raw = e.raw_response().map(|r| r.status().as_u16());
                let code = e.as_service_error().and_then(|s| {
                    aws_sdk_s3::error::ProvideErrorMetadata::code(s).map(str::to_string)
                });
                assert_eq!(
                    (raw, code.as_deref()),
                    (Some(400), Some("TooManyUploads")),
                    "{e:?}"
                );
            }
        }
    }
    made
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn open_uploads_are_bounded_across_instances() {
    let _serial = SERIAL.lock().await;
    let cluster = bounded_cluster();
    let (alice, bob) = (clients(&cluster, ALICE), clients(&cluster, BOB));
    // The key's bound: five of twenty.
    let mine = creates_at_once(&alice, 20, "alice").await;
    assert_eq!(mine.len(), 5, "{mine:?}\n{}", cluster.logs());
    // The bucket's: eight in all, so three of bob's twenty.
    let his = creates_at_once(&bob, 20, "bob").await;
    assert_eq!(his.len(), 3, "{his:?}\n{}", cluster.logs());
    let listed = alice[1]
        .list_multipart_uploads()
        .bucket("default")
        .send()
        .await
        .unwrap();
    assert_eq!(listed.uploads().len(), 8);

    // An upload aborted through the other instance gives its place back to both.
    let (key, id) = &mine[0];
    alice[1]
        .abort_multipart_upload()
        .bucket("default")
        .key(key)
        .upload_id(id)
        .customize()
        .mutate_request(|r| {
            r.headers_mut().insert("fencing-token", "1");
        })
        .send()
        .await
        .unwrap();
    assert_eq!(creates_at_once(&bob, 20, "bob-again").await.len(), 1);
    assert!(creates_at_once(&alice, 4, "alice-full").await.is_empty());

    // So does one completed.
    let (key, id) = &mine[1];
    let part = alice[0]
        .upload_part()
        .bucket("default")
        .key(key)
        .upload_id(id)
        .part_number(1)
        .body(ByteStream::from_static(b"last"))
        .send()
        .await
        .unwrap();
    alice[1]
        .complete_multipart_upload()
        .bucket("default")
        .key(key)
        .upload_id(id)
        .multipart_upload(
            CompletedMultipartUpload::builder()
                .parts(
                    CompletedPart::builder()
                        .part_number(1)
                        .e_tag(part.e_tag().unwrap())
                        .build(),
                )
                .build(),
        )
        .send()
        .await
        .unwrap_or_else(|e| panic!("{e:?}\n{}", cluster.logs()));
    assert_eq!(creates_at_once(&alice, 20, "alice-again").await.len(), 1);
}

/// `n` acquires of distinct leases at once by `creds`, alternating between the instances:
/// the grants. Every other answer must be 429 `TooManyLeases`.
async fn acquires_at_once(
    cluster: &Cluster,
    creds: Creds,
    n: usize,
    tag: &str,
    ttl_ms: u64,
) -> Vec<serde_json::Value> {
    let c = common::client();
    let acquires: Vec<_> = (0..n)
        .map(|i| {
            let req = c
                .post(cluster.url(1 + i % 2, &format!("/v1/leases/{tag}-{i}")))
                .json(&json!({"holder": "h", "ttl_ms": ttl_ms}));
            let c = c.clone();
            tokio::spawn(async move { send_json(&c, req, Some(creds)).await })
        })
        .collect();
    let mut granted = Vec::new();
    for a in acquires {
        match a.await.unwrap() {
            (200, grant) => granted.push(grant),
            (status, body) => assert_eq!(
                (status, body["error"].as_str()),
                (429, Some("TooManyLeases")),
                "{body}"
            ),
        }
    }
    granted
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn live_leases_are_bounded_across_instances() {
    let _serial = SERIAL.lock().await;
    let cluster = bounded_cluster();
    let granted = acquires_at_once(&cluster, ALICE, 12, "short", 3000).await;
    assert_eq!(granted.len(), 3, "{granted:?}\n{}", cluster.logs());
    // Another key has room of its own.
    assert_eq!(
        acquires_at_once(&cluster, BOB, 1, "his", 60_000)
            .await
            .len(),
        1
    );

    // A lease released (through instance 2, whichever granted it) gives its place back to
    // both.
    let g = &granted[0];
    let name = g["name"].as_str().unwrap();
    let proof = json!({"holder": "h", "token": g["token"], "secret": g["lease_secret"]});
    let c = common::client();
    let (status, body) = send_json(
        &c,
        c.delete(cluster.url(2, &format!("/v1/leases/{name}")))
            .json(&proof),
        Some(ALICE),
    )
    .await;
    assert_eq!(status, 204, "{body}");
    assert_eq!(
        acquires_at_once(&cluster, ALICE, 6, "long", 60_000)
            .await
            .len(),
        1
    );

    // The two short leases left stop counting when they expire, with nothing written.
    tokio::time::sleep(Duration::from_millis(3500)).await;
    assert_eq!(
        acquires_at_once(&cluster, ALICE, 6, "later", 60_000)
            .await
            .len(),
        2
    );
}
