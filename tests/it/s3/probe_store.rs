//! `fencegate probe-store BACKEND`: whether a store can be fronted in safe mode, told before
//! any data goes through it, by the probe `serve` runs at start-up. ministack is safe, moto is
//! not (it ignores If-Match on CompleteMultipartUpload), and a store that checks and then
//! writes passes every sequential check but lets racing writers through, so it is refused too.

use crate::common;
use common::s3proxy::{Mode, S3Proxy};
use common::store::{Store, StoreKind};
use serde_json::Value;
use std::path::Path;
use std::process::Command;

const BUCKET: &str = "probe-me";

fn config(dir: &Path, endpoint: &str, extra: &str) -> std::path::PathBuf {
    let file = dir.join("probe.toml");
    std::fs::write(
        &file,
        format!(
            "[backends.store]\nkind = \"s3\"\nendpoint = \"{endpoint}\"\naccess_key_id = \"test\"\nsecret_access_key = \"test\"\n{extra}\n\n[backends.local]\nkind = \"fs\"\nroot = \"{}\"\n\n[buckets.reports]\nbackend = \"store\"\nbackend_bucket = \"{BUCKET}\"\nbackend_prefix = \"reports/\"\n",
            dir.join("fs").display()
        ),
    )
    .unwrap();
    file
}

/// Runs `fencegate probe-store ARGS`: its exit code, stdout and stderr.
fn probe(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_fencegate"))
        .arg("probe-store")
        .args(args)
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn row<'a>(verdict: &'a Value, capability: &str) -> &'a Value {
    verdict["capabilities"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["capability"].as_str().unwrap().starts_with(capability))
        .unwrap_or_else(|| panic!("no row {capability}: {verdict}"))
}

/// Nothing the probe wrote stays: no object, no upload.
async fn assert_clean(store: &Store) {
    let c = store.client();
    let listed = c.list_objects_v2().bucket(BUCKET).send().await.unwrap();
    assert_eq!(listed.key_count(), Some(0), "{listed:?}");
    let uploads = c
        .list_multipart_uploads()
        .bucket(BUCKET)
        .send()
        .await
        .unwrap();
    assert!(uploads.uploads().is_empty(), "{uploads:?}");
}

async fn store(kind: StoreKind) -> Store {
    let store = Store::start(kind);
    store.create_bucket(BUCKET).await;
    store
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ministack_is_safe() {
    let store = store(StoreKind::Ministack).await;
    let dir = tempfile::tempdir().unwrap();
    let file = config(dir.path(), &store.endpoint(), "");
    let file = file.to_str().unwrap();

    let (code, table, err) = probe(&["store", "--config", file]);
    assert_eq!(code, 0, "{table}{err}");
    assert!(
        table.contains("store bucket probe-me, prefix reports/"),
        "{table}"
    );
    assert!(
        table.contains("SAFE: fencegate serves this store in safe mode"),
        "{table}"
    );
    assert!(
        table.contains("- writes made around fencegate are never overwritten")
            && table.contains("- cluster mode (several instances on one etcd table) may serve"),
        "{table}"
    );
    assert!(
        !table.contains(" !"),
        "nothing marked as not honoured: {table}"
    );

    let (code, json, err) = probe(&["store", "--config", file, "--json", "--writers", "8"]);
    assert_eq!(code, 0, "{err}");
    let verdicts: Value = serde_json::from_str(&json).unwrap();
    let v = &verdicts[0];
    assert_eq!(
        (v["safe"].as_bool(), v["starts"].as_bool()),
        (Some(true), Some(true)),
        "{v}"
    );
    for capability in [
        "If-None-Match: * on PutObject",
        "If-Match on PutObject",
        "If-None-Match: * on CompleteMultipartUpload",
        "If-Match on CompleteMultipartUpload",
        "If-Match on DeleteObject",
    ] {
        assert_eq!(row(v, capability)["result"], "honoured", "{v}");
    }
    let races = v["races"].as_array().unwrap();
    assert_eq!(
        races.len(),
        4,
        "PutObject and CompleteMultipartUpload, each condition: {v}"
    );
    for race in races {
        assert_eq!(
            (race["writers"].as_u64(), race["won"].as_u64()),
            (Some(8), Some(1)),
            "{race}"
        );
        assert_eq!(race["refused"].as_u64(), Some(7), "{race}");
        assert_eq!(race["kept_winner"].as_bool(), Some(true), "{race}");
    }
    assert_clean(&store).await;
}

/// moto ignores If-Match on CompleteMultipartUpload: not safe, exit 1, and `serve` would
/// refuse it; with `conditional_writes = "fencegate"` (or its old name) it would start, the
/// probe still says it is not safe, and says what clients of fencegate get on it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn moto_is_not_safe() {
    let store = store(StoreKind::Moto).await;
    let dir = tempfile::tempdir().unwrap();
    let file = config(dir.path(), &store.endpoint(), "");
    let (code, table, err) = probe(&["store", "--config", file.to_str().unwrap()]);
    assert_eq!(code, 1, "{table}{err}");
    assert!(
        table.contains("NOT SAFE: serve refuses to start on it"),
        "{table}"
    );
    assert!(
        table.contains("set conditional_writes = \"fencegate\""),
        "{table}"
    );
    assert!(
        table.contains("WHAT CLIENTS OF FENCEGATE GET:\n    - none"),
        "{table}"
    );

    let (code, json, _) = probe(&["store", "--config", file.to_str().unwrap(), "--json"]);
    assert_eq!(code, 1);
    let v = &serde_json::from_str::<Value>(&json).unwrap()[0];
    assert_eq!(
        (v["safe"].as_bool(), v["starts"].as_bool()),
        (Some(false), Some(false)),
        "{v}"
    );
    let row_cmu = row(v, "If-Match on CompleteMultipartUpload");
    assert_eq!(
        (row_cmu["result"].as_str(), row_cmu["ok"].as_bool()),
        (Some("ignored"), Some(false))
    );
    assert_eq!(row(v, "If-Match on PutObject")["result"], "honoured");

    let file = config(dir.path(), &store.endpoint(), StoreKind::Moto.opt_in());
    let (code, json, _) = probe(&["store", "--config", file.to_str().unwrap(), "--json"]);
    assert_eq!(code, 1, "an opt-in does not make a store safe");
    let v = &serde_json::from_str::<Value>(&json).unwrap()[0];
    assert_eq!(
        (v["safe"].as_bool(), v["starts"].as_bool()),
        (Some(false), Some(true)),
        "{v}"
    );
    assert!(
        v["accepted"][0]
            .as_str()
            .unwrap()
            .contains("fencegate decides every condition alone"),
        "{v}"
    );
    let guarantees: Vec<&str> = v["guarantees"]
        .as_array()
        .unwrap()
        .iter()
        .map(|g| g.as_str().unwrap())
        .collect();
    assert!(
        guarantees[1].contains("decided atomically"),
        "{guarantees:?}"
    );
    assert!(
        guarantees[2].contains("overwritten undetected"),
        "{guarantees:?}"
    );
    assert!(
        guarantees[4].starts_with("cluster mode is refused"),
        "{guarantees:?}"
    );
    // The old name is read as the new one.
    let file = config(
        dir.path(),
        &store.endpoint(),
        "unsafe_no_conditional_writes = true",
    );
    let (code, table, err) = probe(&["store", "--config", file.to_str().unwrap()]);
    assert_eq!(code, 1, "{table}{err}");
    assert!(table.contains("serve starts only because"), "{table}");
    let file = config(
        dir.path(),
        &store.endpoint(),
        "conditional_writes = \"store\"\nunsafe_no_conditional_writes = true",
    );
    let (code, _, err) = probe(&["store", "--config", file.to_str().unwrap()]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("keep conditional_writes alone"), "{err}");
    assert_clean(&store).await;
}

/// A store that judges each conditional PutObject by a HEAD and then writes passes every
/// check made one at a time, and lets every racing writer through. probe-store says so, and
/// `serve` refuses to start on it, by the same probe.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_store_that_checks_then_writes_loses_the_race() {
    let store = store(StoreKind::Ministack).await;
    let proxy = S3Proxy::start(store.endpoint()).await;
    proxy.set(Mode::CheckThenWrite);
    let dir = tempfile::tempdir().unwrap();
    let file = config(dir.path(), &proxy.endpoint(), "");
    let (code, json, err) = tokio::task::spawn_blocking({
        let file = file.clone();
        move || probe(&["store", "--config", file.to_str().unwrap(), "--json"])
    })
    .await
    .unwrap();
    assert_eq!(code, 1, "{json}{err}");
    let v = &serde_json::from_str::<Value>(&json).unwrap()[0];
    for race in v["races"].as_array().unwrap() {
        assert!(
            race["won"].as_u64().unwrap() > 1,
            "several writers won: {race}"
        );
    }
    // One at a time every condition held; racing, none did: PutObject and
    // CompleteMultipartUpload alike.
    for condition in s3_conditions() {
        assert_eq!(
            row(v, condition)["result"],
            "ignored by racing writers",
            "{v}"
        );
    }
    assert_eq!(
        row(v, "If-Match on DeleteObject")["result"],
        "honoured",
        "{v}"
    );

    let out = tokio::task::spawn_blocking(move || {
        Command::new(env!("CARGO_BIN_EXE_fencegate"))
            .args(["serve", "--listen", "127.0.0.1:0", "--config"])
            .arg(&file)
            .arg("--data-dir")
            .arg(file.parent().unwrap().join("data"))
            .output()
            .unwrap()
    })
    .await
    .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success(),
        "serve started on a racy store: {err}"
    );
    assert!(err.contains("If-None-Match: * on PutObject"), "{err}");
    assert!(err.contains("If-Match on CompleteMultipartUpload"), "{err}");
    assert_clean(&store).await;
}

fn s3_conditions() -> [&'static str; 4] {
    [
        "If-None-Match: * on PutObject",
        "If-Match on PutObject",
        "If-None-Match: * on CompleteMultipartUpload",
        "If-Match on CompleteMultipartUpload",
    ]
}

/// A store that refuses every racing writer gives the race no winner: no condition explains
/// that, so the probe says it cannot judge the store (exit 2) instead of blaming a
/// condition.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_race_without_a_winner_is_no_verdict() {
    let store = store(StoreKind::Ministack).await;
    let proxy = S3Proxy::start(store.endpoint()).await;
    let dir = tempfile::tempdir().unwrap();
    let file = config(dir.path(), &proxy.endpoint(), "");
    // Only the racers are refused: the sequential checks pass.
    proxy.set(Mode::RefuseRacingPuts);
    let (code, out, err) =
        tokio::task::spawn_blocking(move || probe(&["store", "--config", file.to_str().unwrap()]))
            .await
            .unwrap();
    assert_eq!(code, 2, "{out}{err}");
    assert!(err.contains("the store refused all 16"), "{err}");
    assert_clean(&store).await;
}

/// A probe that fails half-way (UploadPart answered 503), or is interrupted (SIGINT), leaves
/// neither a scratch object nor an upload behind.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_or_interrupted_probe_cleans_up() {
    let store = store(StoreKind::Ministack).await;
    let proxy = S3Proxy::start(store.endpoint()).await;
    let dir = tempfile::tempdir().unwrap();
    let file = config(dir.path(), &proxy.endpoint(), "");

    proxy.set(Mode::FailUploadParts);
    let path = file.clone();
    let (code, out, err) =
        tokio::task::spawn_blocking(move || probe(&["store", "--config", path.to_str().unwrap()]))
            .await
            .unwrap();
    assert_eq!(code, 2, "{out}{err}");
    assert!(err.contains("UploadPart"), "{err}");
    proxy.set(Mode::Pass);
    assert_clean(&store).await;

    // Slow enough to be interrupted with objects and uploads in the store.
    proxy.set(Mode::Slow);
    let child = Command::new(env!("CARGO_BIN_EXE_fencegate"))
        .args(["probe-store", "store", "--config"])
        .arg(&file)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let c = store.client();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        let listed = c.list_objects_v2().bucket(BUCKET).send().await.unwrap();
        if listed.key_count().unwrap_or(0) > 0 {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the probe wrote nothing"
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
    let out = tokio::task::spawn_blocking(move || child.wait_with_output().unwrap())
        .await
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("interrupted"), "{err}");
    proxy.set(Mode::Pass);
    assert_clean(&store).await;
}

/// What probe-store cannot probe is said, with exit 2.
#[test]
fn what_cannot_be_probed_is_named() {
    let dir = tempfile::tempdir().unwrap();
    let file = config(dir.path(), "http://127.0.0.1:9", "");
    let file = file.to_str().unwrap();
    let (code, _, err) = probe(&["nope", "--config", file]);
    assert_eq!(code, 2);
    assert!(
        err.contains("no backend nope (it has: local, store)"),
        "{err}"
    );
    let (code, _, err) = probe(&["local", "--config", file]);
    assert_eq!(code, 2);
    assert!(err.contains("is an fs backend"), "{err}");
    // A store that cannot be reached is an error, not a verdict.
    let (code, out, err) = probe(&["store", "--config", file, "--bucket", "elsewhere"]);
    assert_eq!(code, 2, "{out}");
    assert!(err.contains("store bucket elsewhere"), "{err}");
    let (code, _, err) = probe(&["store", "--config", file, "--writers", "1"]);
    assert_eq!(code, 2, "{err}");
}
