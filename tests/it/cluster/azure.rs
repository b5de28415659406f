//! Cluster mode on the azure backend: two instances on a 3-member etcd over Azurite, each
//! commit authorized by a SAS that expires at its intent's deadline (every instance's start-up
//! probe proves Azurite refuses an expired one).

use crate::common;
use common::cluster::Cluster;
use common::{client, get_bytes, put};

use super::SERIAL;

/// Tokens, bytes and bypass detection hold across instances: a write through one instance is
/// served by the other, a stale token through the other is refused, a racing pair of creates
/// through both has one winner, and a blob written around fencegate is detected by both.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_instances_fence_one_azure_container() {
    let _serial = SERIAL.lock().await;
    let cluster = Cluster::up(2, "azurite");
    let c = client();
    let (s, body) = put(&c, &cluster.object(1, "doc"), Some("5"), b"five").await;
    assert_eq!(s, 200, "{body}\n{}", cluster.logs());
    assert_eq!(get_bytes(&c, &cluster.object(2, "doc")).await.1, b"five");
    let (s, body) = put(&c, &cluster.object(2, "doc"), Some("4"), b"stale").await;
    assert_eq!(
        (s, body["error"].as_str()),
        (409, Some("StaleFencingToken")),
        "{body}"
    );
    let (s, body) = put(&c, &cluster.object(2, "doc"), Some("6"), b"six").await;
    assert_eq!(s, 200, "{body}");
    assert_eq!(get_bytes(&c, &cluster.object(1, "doc")).await.1, b"six");
    // Racing creates of one new key with one token through both instances: one wins.
    let urls = [cluster.object(1, "race"), cluster.object(2, "race")];
    let (a, b) = tokio::join!(
        c.put(&urls[0])
            .header("Fencing-Token", "9")
            .header("If-None-Match", "*")
            .body("one")
            .send(),
        c.put(&urls[1])
            .header("Fencing-Token", "9")
            .header("If-None-Match", "*")
            .body("two")
            .send()
    );
    let statuses = [a.unwrap().status().as_u16(), b.unwrap().status().as_u16()];
    assert_eq!(
        statuses.iter().filter(|s| **s == 200).count(),
        1,
        "exactly one create wins: {statuses:?}"
    );
    // A blob written around fencegate is caught through either instance.
    let endpoint = format!(
        "http://127.0.0.1:{}/devstoreaccount1",
        cluster.var("STORE_PORT")
    );
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/e2e/azure_behind.py");
    let python = concat!(env!("CARGO_MANIFEST_DIR"), "/.venv/bin/python");
    let mut behind = std::process::Command::new(python)
        .args([
            script,
            "--endpoint",
            &endpoint,
            "put",
            "fencegate-cluster",
            "doc",
            "-",
        ])
        .stdin(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    use std::io::Write;
    behind.stdin.take().unwrap().write_all(b"around").unwrap();
    assert!(behind.wait().unwrap().success());
    for n in [1, 2] {
        let (s, body) = put(&c, &cluster.object(n, "doc"), Some("7"), b"seven").await;
        assert_eq!(
            (s, body["error"].as_str()),
            (409, Some("BypassDetected")),
            "{body}"
        );
    }
}
