//! The claim on a store place: two instances with fence tables of their own on one store
//! place would each decide conditions and tokens alone, so the second refuses to start,
//! naming the place and the claim; a restart of the first starts; deleting the claim lets
//! the second start. The claim is fencegate's own: hidden from listings and refused as a key.

use crate::common;
use common::ministack::Ministack;
use common::{try_start, Server};
use std::path::Path;
use std::process::Command;

const BUCKET: &str = "claimed";
const CLAIM: &str = "lake/.fencegate-probe/claim";

fn config(endpoint: &str, prefix: &str) -> String {
    config_named(endpoint, prefix, "data")
}

/// The configuration with the fencegate bucket named `bucket`.
fn config_named(endpoint: &str, prefix: &str, bucket: &str) -> String {
    format!(
        "[backends.store]\nkind = \"s3\"\nendpoint = \"{endpoint}\"\naccess_key_id = \"test\"\nsecret_access_key = \"test\"\n\n[buckets.{bucket}]\nbackend = \"store\"\nbackend_bucket = \"{BUCKET}\"\nbackend_prefix = \"{prefix}\"\n"
    )
}

async fn claim_of(store: &Ministack) -> Option<serde_json::Value> {
    claim_at(store, CLAIM).await
}

/// The claim object `key` of the store bucket, if any.
async fn claim_at(store: &Ministack, key: &str) -> Option<serde_json::Value> {
    let out = store
        .client()
        .get_object()
        .bucket(BUCKET)
        .key(key)
        .send()
        .await
        .ok()?;
    let bytes = out.body.collect().await.unwrap().into_bytes();
    Some(serde_json::from_slice(&bytes).unwrap())
}

#[tokio::test]
async fn a_second_fence_table_on_one_store_place_is_refused_until_its_claim_is_deleted() {
    let store = Ministack::start();
    store.create_bucket(BUCKET).await;
    let dir = tempfile::tempdir().unwrap();
    let (first, second) = (dir.path().join("first"), dir.path().join("second"));
    let text = config(&store.endpoint(), "lake/");

    let (up, log) = try_start(&first, &text, &[]);
    assert!(up, "{log}");
    let claim = claim_of(&store)
        .await
        .expect("the first start claims the place");
    let first_id = claim["table_id"].as_str().unwrap().to_string();
    assert_eq!(first_id.len(), 32, "{claim}");

    // Another table on the same place: refused, with the place, the claim and what to do.
    let (up, log) = try_start(&second, &text, &[]);
    assert!(!up, "{log}");
    for part in [
        "already fenced by another fence table",
        &first_id,
        "prefix \"lake/\" of store bucket",
        CLAIM,
        "join them on one etcd table",
        "fences rebuild --bucket data",
    ] {
        assert!(log.contains(part), "{part:?} not in:\n{log}");
    }

    // A restart of the first: its own table, its own claim.
    let (up, log) = try_start(&first, &text, &[]);
    assert!(up, "{log}");
    // Another place of the same store bucket is free for the second table.
    let (up, log) = try_start(&second, &config(&store.endpoint(), "other/"), &[]);
    assert!(up, "{log}");

    // The negative control: with the claim deleted, the second table claims the place, and
    // now the first is the one refused.
    store
        .client()
        .delete_object()
        .bucket(BUCKET)
        .key(CLAIM)
        .send()
        .await
        .unwrap();
    let (up, log) = try_start(&second, &text, &[]);
    assert!(up, "{log}");
    let claim = claim_of(&store).await.unwrap();
    assert_ne!(claim["table_id"].as_str().unwrap(), first_id);
    let (up, log) = try_start(&first, &text, &[]);
    assert!(
        !up && log.contains("already fenced by another fence table"),
        "{log}"
    );
}

#[tokio::test]
async fn the_claim_is_hidden_from_listings_and_refused_as_a_key() {
    let store = Ministack::start();
    store.create_bucket(BUCKET).await;
    let dir = tempfile::tempdir().unwrap();
    let s = Server::start(
        &dir.path().join("data"),
        Some(&config(&store.endpoint(), "lake/")),
    );
    let before = claim_of(&store).await.expect("claimed at start-up");
    let c = common::client();
    let url = s.object_url("data", "kept.txt");
    assert_eq!(common::put(&c, &url, Some("1"), b"x").await.0, 200);

    for (what, path) in [
        ("ListObjectsV2", "/data?list-type=2"),
        (
            "ListObjectsV2 with a delimiter",
            "/data?list-type=2&delimiter=/",
        ),
        ("the native listing", "/v1/objects/data"),
    ] {
        let (status, body) = common::get_bytes(&c, &s.url(path)).await;
        let body = String::from_utf8_lossy(&body);
        assert_eq!(status, 200, "{what}: {body}");
        assert!(body.contains("kept.txt"), "{what}: {body}");
        assert!(!body.contains("fencegate-probe"), "{what}: {body}");
    }

    let key = ".fencegate-probe/claim";
    let s3_url = s.url(&format!("/data/{key}"));
    let native_url = s.object_url("data", key);
    let answers = [
        ("S3 PUT", c.put(&s3_url).body("mine").send().await.unwrap()),
        ("S3 GET", c.get(&s3_url).send().await.unwrap()),
        ("S3 DELETE", c.delete(&s3_url).send().await.unwrap()),
        (
            "native PUT",
            c.put(&native_url)
                .header("Fencing-Token", "9")
                .body("mine")
                .send()
                .await
                .unwrap(),
        ),
        (
            "native DELETE",
            c.delete(&native_url)
                .header("Fencing-Token", "9")
                .send()
                .await
                .unwrap(),
        ),
    ];
    for (what, resp) in answers {
        let status = resp.status().as_u16();
        let body = resp.text().await.unwrap();
        assert_eq!(status, 400, "{what}: {body}");
        assert!(body.contains(".fencegate-probe/"), "{what}: {body}");
    }
    assert_eq!(
        claim_of(&store).await,
        Some(before),
        "the claim is untouched"
    );
}

/// One table, the place served under another bucket name (a bucket renamed, or two names of
/// one store in one configuration): the rows recorded under the first name do not fence the
/// second, so it is refused, naming the bucket and the rebuild; the rebuild takes the claim
/// over and the bucket starts under its new name.
#[tokio::test]
async fn a_renamed_bucket_on_a_claimed_place_is_refused_until_its_fences_are_rebuilt() {
    let store = Ministack::start();
    store.create_bucket(BUCKET).await;
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let (up, log) = try_start(&data, &config(&store.endpoint(), "lake/"), &[]);
    assert!(up, "{log}");
    assert_eq!(claim_of(&store).await.unwrap()["bucket"], "data");

    let renamed = config_named(&store.endpoint(), "lake/", "renamed");
    let (up, log) = try_start(&data, &renamed, &[]);
    assert!(!up, "{log}");
    for part in [
        "already fenced by bucket \"data\" of this fence table",
        "fences rebuild --bucket renamed",
        CLAIM,
    ] {
        assert!(log.contains(part), "{part:?} not in:\n{log}");
    }

    rebuild(&data, &renamed, "renamed");
    assert_eq!(claim_of(&store).await.unwrap()["bucket"], "renamed");
    let (up, log) = try_start(&data, &renamed, &[]);
    assert!(up, "{log}");
    // And the old name is now the one refused.
    let (up, log) = try_start(&data, &config(&store.endpoint(), "lake/"), &[]);
    assert!(
        !up && log.contains("already fenced by bucket \"renamed\""),
        "{log}"
    );
}

/// `fences rebuild --bucket` of one bucket with the data directory lost.
fn rebuild(data: &Path, config: &str, bucket: &str) {
    let file = data.with_extension("rebuild.toml");
    std::fs::write(&file, config).unwrap();
    let out = Command::new(common::binary())
        .args(["fences", "rebuild", "--bucket", bucket, "--config"])
        .arg(&file)
        .arg("--data-dir")
        .arg(data)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "rebuild of {bucket}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The data directory lost under two buckets: the start is refused (the places are the old
/// table's), each bucket's rebuild takes over its own place's claim and leaves the other's to
/// its own rebuild, and once both are rebuilt fencegate starts.
#[tokio::test]
async fn each_rebuild_takes_over_its_own_buckets_claim_after_a_lost_data_dir() {
    let store = Ministack::start();
    store.create_bucket(BUCKET).await;
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let endpoint = store.endpoint();
    let text = format!(
        "{}[buckets.other]\nbackend = \"store\"\nbackend_bucket = \"{BUCKET}\"\nbackend_prefix = \"other/\"\n",
        config(&endpoint, "lake/")
    );
    let (up, log) = try_start(&data, &text, &[]);
    assert!(up, "{log}");
    let other = "other/.fencegate-probe/claim";
    let old = claim_of(&store).await.unwrap()["table_id"].clone();
    assert_eq!(claim_at(&store, other).await.unwrap()["table_id"], old);

    std::fs::remove_dir_all(&data).unwrap();
    let (up, log) = try_start(&data, &text, &[]);
    assert!(!up && log.contains("fences rebuild --bucket"), "{log}");

    rebuild(&data, &text, "data");
    let new = claim_of(&store).await.unwrap()["table_id"].clone();
    assert_ne!(new, old, "the rebuilt bucket's place is the new table's");
    assert_eq!(
        claim_at(&store, other).await.unwrap()["table_id"],
        old,
        "the other place waits for its own rebuild"
    );
    let (up, log) = try_start(&data, &text, &[]);
    assert!(
        !up && log.contains("fences rebuild --bucket other"),
        "{log}"
    );

    rebuild(&data, &text, "other");
    assert_eq!(claim_at(&store, other).await.unwrap()["table_id"], new);
    let (up, log) = try_start(&data, &text, &[]);
    assert!(up, "{log}");
}
