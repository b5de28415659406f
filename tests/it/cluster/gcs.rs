//! Cluster mode on the gcs backend: two instances on one etcd over the scripted GCS double,
//! each commit going by a signed URL that expires at its intent's deadline (every instance's
//! start-up probe proves an expired one is refused).

use crate::common;
use common::etcd::Etcd;
use common::gcs_fake::GcsFake;
use common::{client, get_bytes, put, Server};

use super::SERIAL;

/// Tokens, bytes and bypass detection hold across instances: a write through one instance is
/// served by the other, a stale token through the other is refused, a racing pair of creates
/// through both has one winner, and an object written around fencegate is detected by both.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_instances_fence_one_gcs_bucket() {
    let _serial = SERIAL.lock().await;
    let dir = tempfile::tempdir().unwrap();
    let etcd = Etcd::start(&dir.path().join("etcd"));
    let fake = GcsFake::start().await;
    fake.create_bucket("shared");
    let key = fake.write_service_account(dir.path());
    let config = format!(
        "[fence_store]\nkind = \"etcd\"\nendpoints = [\"{}\"]\nprefix = \"fencegate/\"\ntimeout_ms = 2000\nintent_ttl_secs = 3\nstore_apply_secs = 2\nmax_clock_skew_ms = 500\n\n[backends.g]\nkind = \"gcs\"\ncredentials_file = \"{}\"\nendpoint = \"{}\"\n\n[buckets.default]\nbackend = \"g\"\nbackend_bucket = \"shared\"\n",
        etcd.endpoint,
        key.display(),
        fake.url()
    );
    let one = Server::start(&dir.path().join("one"), Some(&config));
    let two = Server::start(&dir.path().join("two"), Some(&config));
    let c = client();
    let at = |s: &Server, key: &str| s.object_url("default", key);
    let (s, body) = put(&c, &at(&one, "doc"), Some("5"), b"five").await;
    assert_eq!(s, 200, "{body}");
    assert_eq!(get_bytes(&c, &at(&two, "doc")).await.1, b"five");
    let (s, body) = put(&c, &at(&two, "doc"), Some("4"), b"stale").await;
    assert_eq!(
        (s, body["error"].as_str()),
        (409, Some("StaleFencingToken")),
        "{body}"
    );
    let (s, body) = put(&c, &at(&two, "doc"), Some("6"), b"six").await;
    assert_eq!(s, 200, "{body}");
    assert_eq!(get_bytes(&c, &at(&one, "doc")).await.1, b"six");
    let (a, b) = tokio::join!(
        c.put(at(&one, "race"))
            .header("Fencing-Token", "9")
            .header("If-None-Match", "*")
            .body("one")
            .send(),
        c.put(at(&two, "race"))
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
    fake.put_direct("shared", "doc", &b"around"[..], &[]);
    for s in [&one, &two] {
        let (status, body) = put(&c, &at(s, "doc"), Some("7"), b"seven").await;
        assert_eq!(
            (status, body["error"].as_str()),
            (409, Some("BypassDetected")),
            "{body}"
        );
    }
    assert_eq!(
        fake.get_direct("shared", "doc").unwrap().0.as_ref(),
        b"around"
    );
}
