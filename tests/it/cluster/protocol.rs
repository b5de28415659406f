//! Several fencegate instances over one store, the fence table shared on a real 3-member etcd
//! cluster (Debian's etcd-server 3.4), the store a real ministack (which honours every
//! condition fencegate needs), all started by `scripts/cluster` on loopback ports. Each test
//! stands for a line of docs/design.md, "The cluster commit protocol".

use crate::common;
use common::cluster::Cluster;
use common::s3proxy::{Mode, S3Proxy};
use common::{binary, client, get_bytes, put, Server};
use std::time::{Duration, Instant};

use super::SERIAL;

async fn token_of(c: &reqwest::Client, url: &str) -> Option<u64> {
    let resp = c.get(url).send().await.unwrap();
    resp.headers()
        .get("fencing-token")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse().ok())
}

async fn delete(c: &reqwest::Client, url: &str, token: &str) -> u16 {
    c.delete(url)
        .header("Fencing-Token", token)
        .send()
        .await
        .unwrap()
        .status()
        .as_u16()
}

async fn acquire(c: &reqwest::Client, url: &str, holder: &str) -> serde_json::Value {
    let resp = c
        .post(url)
        .json(&serde_json::json!({"holder": holder, "ttl_ms": 10000}))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    resp.json().await.unwrap()
}

/// Contract lines 1 and 2 across instances: a token recorded through one instance fences
/// every other; an acknowledged delete of an absent key, too; lease tokens come from one
/// strictly increasing sequence whichever instance grants them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn instances_share_one_fence() {
    let _serial = SERIAL.lock().await;
    let cluster = Cluster::up(2, "ministack");
    let c = client();
    let (s, _) = put(&c, &cluster.object(1, "shared"), Some("5"), b"five").await;
    assert_eq!(s, 200, "{}", cluster.logs());
    let (s, body) = put(&c, &cluster.object(2, "shared"), Some("4"), b"four").await;
    assert_eq!(
        s, 409,
        "instance 2 refuses a token below the one instance 1 recorded: {body}"
    );
    assert_eq!(body["error"], "StaleFencingToken");
    let (s, _) = put(&c, &cluster.object(2, "shared"), Some("6"), b"six").await;
    assert_eq!(s, 200);
    assert_eq!(
        get_bytes(&c, &cluster.object(1, "shared")).await,
        (200, b"six".to_vec())
    );
    assert_eq!(token_of(&c, &cluster.object(1, "shared")).await, Some(6));
    let (s, _) = put(&c, &cluster.object(1, "shared"), Some("5"), b"late").await;
    assert_eq!(s, 409);

    // Cluster mode sends its commits and deletes presigned (docs/design.md, "Bounded
    // intents"): a multipart completion and a delete of an existing object, too.
    let big: &'static [u8] = (0..9 * 1024 * 1024)
        .map(|i| (i % 251) as u8)
        .collect::<Vec<u8>>()
        .leak();
    let (s, body) = put(&c, &cluster.object(1, "big"), Some("1"), big).await;
    assert_eq!(
        s, 200,
        "a 9 MiB write (multipart) through instance 1: {body}"
    );
    assert!(get_bytes(&c, &cluster.object(2, "big")).await.1 == big);
    assert_eq!(token_of(&c, &cluster.object(2, "big")).await, Some(1));
    assert_eq!(delete(&c, &cluster.object(2, "big"), "2").await, 200);
    assert_eq!(get_bytes(&c, &cluster.object(1, "big")).await.0, 404);

    // A delete of an absent key through instance 1 fences instance 2's zombie.
    assert_eq!(delete(&c, &cluster.object(1, "gone"), "7").await, 200);
    let (s, _) = put(&c, &cluster.object(2, "gone"), Some("6"), b"zombie").await;
    assert_eq!(s, 409, "the tombstone's token holds on every instance");
    let fence: serde_json::Value = c
        .get(cluster.url(2, "/v1/fences/default/gone"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(fence["highest"], 7);
    assert_eq!(fence["tombstone"], true);

    // Leases: one holder and one token sequence for a name, whichever instance is asked. A
    // lease held through instance 1 is refused through instance 2, renewed and released there.
    let mut last = 0;
    for n in [1, 2, 1, 2] {
        let g = acquire(&c, &cluster.url(n, "/v1/leases/nightly"), &format!("w{n}")).await;
        let t = g["token"].as_u64().unwrap();
        assert!(
            t > last,
            "lease token {t} from instance {n} is not above {last}"
        );
        last = t;
        let other = 3 - n;
        let r = c
            .post(cluster.url(other, "/v1/leases/nightly"))
            .json(&serde_json::json!({"holder": "intruder", "ttl_ms": 10000}))
            .send()
            .await
            .unwrap();
        assert_eq!(
            r.status(),
            409,
            "instance {other} grants a lease instance {n} granted"
        );
        let shown: serde_json::Value = c
            .get(cluster.url(other, "/v1/leases/nightly"))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        assert_eq!(
            (shown["holder"].clone(), shown["token"].as_u64()),
            (g["holder"].clone(), Some(t))
        );
        let proof =
            serde_json::json!({"holder": g["holder"], "token": t, "secret": g["lease_secret"]});
        let mut renew = proof.clone();
        renew["ttl_ms"] = 20000.into();
        let r = c
            .put(cluster.url(other, "/v1/leases/nightly"))
            .json(&renew)
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200, "renewed through the other instance");
        let mut forged = proof.clone();
        forged["secret"] = "0".repeat(48).into();
        let r = c
            .delete(cluster.url(other, "/v1/leases/nightly"))
            .json(&forged)
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 409, "a wrong secret releases nothing");
        let r = c
            .delete(cluster.url(other, "/v1/leases/nightly"))
            .json(&proof)
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 204, "released through the other instance");
    }
    // A bound grant advances the shared fence: instance 1's grant fences instance 2's writer.
    let r = c
        .post(cluster.url(1, "/v1/leases/bound"))
        .json(&serde_json::json!({"holder": "a", "ttl_ms": 10000, "bucket": "default", "key": "shared"}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let g: serde_json::Value = r.json().await.unwrap();
    assert!(g["token"].as_u64().unwrap() > 6, "{g}");
    let (s, _) = put(&c, &cluster.object(2, "shared"), Some("6"), b"old holder").await;
    assert_eq!(
        s, 409,
        "the bound grant through instance 1 fenced token 6 everywhere"
    );
}

/// Contract line 1 under contention: writers with tokens 1..=40 race on one key through both
/// instances. Whatever interleaving the instances and etcd chose, the object ends at a token
/// no lower than the highest acknowledged one, and no write is acknowledged after a higher
/// token's write was.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn racing_writers_through_both_instances_keep_the_order() {
    let _serial = SERIAL.lock().await;
    let cluster = Cluster::up(2, "ministack");
    let c = client();
    let cluster = std::sync::Arc::new(cluster);
    let mut tasks = Vec::new();
    let order = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    for t in 1..=40u64 {
        let (c, cluster, order) = (c.clone(), cluster.clone(), order.clone());
        tasks.push(tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(rand_delay(t))).await;
            let n = 1 + (t as usize % 2);
            let url = cluster.object(n, "contended");
            let body: &'static [u8] =
                Box::leak(format!("token {t}").into_bytes().into_boxed_slice());
            let started = Instant::now();
            let (s, body) = put(&c, &url, Some(&t.to_string()), body).await;
            assert!(
                s == 200 || (s == 409 && body["error"] == "StaleFencingToken") || s == 503,
                "token {t}: {s} {body}"
            );
            order.lock().unwrap().push((t, s, started, Instant::now()));
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    let order = order.lock().unwrap().clone();
    let acked: Vec<_> = order.iter().filter(|o| o.1 == 200).collect();
    assert!(!acked.is_empty());
    let max_acked = acked.iter().map(|o| o.0).max().unwrap();
    let (s, bytes) = get_bytes(&c, &cluster.object(1, "contended")).await;
    assert_eq!(s, 200);
    let final_token = token_of(&c, &cluster.object(2, "contended")).await.unwrap();
    assert!(
        final_token >= max_acked,
        "the object holds token {final_token} ({}), below the acknowledged {max_acked}",
        String::from_utf8_lossy(&bytes)
    );
    assert_eq!(bytes, format!("token {final_token}").into_bytes());
    // A write that started after a higher token's write was acknowledged is never acknowledged.
    for a in &acked {
        for b in &acked {
            assert!(
                !(b.0 < a.0 && b.2 > a.3),
                "token {} was acknowledged after token {} had been",
                b.0,
                a.0
            );
        }
    }
}

fn rand_delay(t: u64) -> u64 {
    (t * 7919) % 50
}

/// Failure behaviour (issue: etcd loses quorum, the leader dies). The leader killed: writes
/// go on after the election. Two of three members down: writes get 503 FenceStoreUnavailable
/// and nothing is acknowledged, reads keep working; with the members back, writes resume.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn etcd_leader_loss_and_quorum_loss() {
    let _serial = SERIAL.lock().await;
    let cluster = Cluster::up(2, "ministack");
    let c = client();
    let (s, _) = put(&c, &cluster.object(1, "q"), Some("1"), b"one").await;
    assert_eq!(s, 200, "{}", cluster.logs());

    let leader = cluster.leader();
    cluster.signal(&leader, "KILL");
    let started = Instant::now();
    let mut token = 2u64;
    loop {
        let (s, body) = put(
            &c,
            &cluster.object(2, "q"),
            Some(&token.to_string()),
            b"after election",
        )
        .await;
        if s == 200 {
            break;
        }
        assert_eq!(s, 503, "{body}");
        assert!(
            started.elapsed() < Duration::from_secs(15),
            "no write succeeded within 15 s of the leader's death: {body}"
        );
        token += 1;
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    // With the old leader still down (one member of three), every write succeeds: each call
    // that meets the dead member is made on another (review round 13, N3).
    for n in 1..=20u64 {
        let t = (token + n).to_string();
        let (s, body) = put(
            &c,
            &cluster.object(1 + n as usize % 2, "q"),
            Some(&t),
            b"one down",
        )
        .await;
        assert_eq!(s, 200, "write {n} with one member down: {body}");
    }
    cluster.start(&leader);

    // Two members down: no quorum.
    let members: Vec<String> = ["etcd1", "etcd2", "etcd3"]
        .iter()
        .filter(|m| **m != cluster.leader())
        .map(|m| m.to_string())
        .collect();
    for m in &members {
        cluster.signal(m, "KILL");
    }
    let before = token_of(&c, &cluster.object(1, "q")).await;
    let started = Instant::now();
    let (s, body) = put(&c, &cluster.object(1, "q"), Some("100"), b"no quorum").await;
    assert_eq!(s, 503, "{body}");
    assert_eq!(body["error"], "FenceStoreUnavailable", "{body}");
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "the refusal took {:?}",
        started.elapsed()
    );
    let (s, bytes) = get_bytes(&c, &cluster.object(2, "q")).await;
    assert_eq!(
        (s, bytes),
        (200, b"one down".to_vec()),
        "reads keep working"
    );
    assert_eq!(
        token_of(&c, &cluster.object(2, "q")).await,
        before,
        "nothing was acknowledged"
    );
    for m in &members {
        cluster.start(m);
    }
    let started = Instant::now();
    loop {
        let (s, body) = put(&c, &cluster.object(1, "q"), Some("101"), b"quorum back").await;
        if s == 200 {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "writes did not resume: {s} {body}"
        );
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    assert_eq!(
        get_bytes(&c, &cluster.object(2, "q")).await.1,
        b"quorum back".to_vec()
    );
}

/// Another instance of `cluster`, whose store requests go through a proxy that can hold them.
async fn instance_behind_proxy(cluster: &Cluster, name: &str) -> (S3Proxy, Server) {
    let proxy = S3Proxy::start(cluster.store_endpoint()).await;
    let dir = cluster.dir.path().join(name);
    std::fs::create_dir_all(&dir).unwrap();
    let config = format!(
        "{}\n[backends.store]\nkind = \"s3\"\nendpoint = \"{}\"\nregion = \"us-east-1\"\naccess_key_id = \"test\"\nsecret_access_key = \"test\"\nread_timeout_secs = 30\n\n[buckets.default]\nbackend = \"store\"\nbackend_bucket = \"fencegate-cluster\"\n",
        cluster.fence_store_toml(),
        proxy.endpoint()
    );
    let server = Server::start(&dir, Some(&config));
    (proxy, server)
}

/// A PUT with an Idempotency-Key: (status, Idempotent-Replayed, JSON body).
async fn keyed_put(
    c: &reqwest::Client,
    url: &str,
    token: &str,
    key: &str,
    body: &'static [u8],
) -> (u16, bool, serde_json::Value) {
    let resp = c
        .put(url)
        .header("Fencing-Token", token)
        .header("Idempotency-Key", key)
        .body(body)
        .send()
        .await
        .unwrap();
    let replayed = resp.headers().get("idempotent-replayed").is_some();
    (
        resp.status().as_u16(),
        replayed,
        resp.json().await.unwrap_or_default(),
    )
}

/// Idempotency-Key across instances (docs/design.md, "Idempotent retries"): an instance is
/// killed (-9) after the store applied its write and before it answered; the client retries
/// on the other instance with the same key. Exactly one commit happens (the object is not
/// written again) and the retry gets the first answer; the same key with another body or
/// token gets 422.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retry_after_an_instance_died_before_answering_commits_once() {
    let _serial = SERIAL.lock().await;
    let cluster = Cluster::up(1, "ministack");
    let c = client();
    let url = cluster.object(1, "idem");
    let (s, _) = put(&c, &url, Some("1"), b"first").await;
    assert_eq!(s, 200, "{}", cluster.logs());
    let (proxy, dying) = instance_behind_proxy(&cluster, "dying").await;
    // The store applies the commit; its answer never comes back.
    proxy.set(Mode::StallConditionalWrites);
    let first = {
        let (c, url) = (c.clone(), dying.object_url("default", "idem"));
        tokio::spawn(async move {
            let _ = c
                .put(url)
                .header("Fencing-Token", "2")
                .header("Idempotency-Key", "9c1d-once")
                .body("once")
                .send()
                .await;
        })
    };
    let started = Instant::now();
    loop {
        let (_, bytes) = get_bytes(&c, &url).await;
        if bytes == b"once" {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "the write never reached the store: {}",
            cluster.logs()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    dying.kill9();
    first.abort();
    let head = c.head(&url).send().await.unwrap();
    let modified = head.headers().get("last-modified").cloned();
    let etag = head.headers().get("etag").cloned();
    // A second write would carry a later Last-Modified (whole seconds).
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let (s, replayed, body) = keyed_put(&c, &url, "2", "9c1d-once", b"once").await;
    assert_eq!(s, 200, "the retry on the other instance: {body}");
    assert!(replayed, "the first answer is replayed: {body}");
    assert_eq!(
        body["etag"].as_str(),
        etag.as_ref().and_then(|e| e.to_str().ok())
    );
    assert_eq!(body["token"], 2);
    let head = c.head(&url).send().await.unwrap();
    assert_eq!(
        head.headers().get("last-modified").cloned(),
        modified,
        "the retry wrote the object again"
    );
    for (token, bytes) in [("2", &b"other"[..]), ("3", &b"once"[..])] {
        let resp = c
            .put(&url)
            .header("Fencing-Token", token)
            .header("Idempotency-Key", "9c1d-once")
            .body(bytes)
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), 422);
        let body: serde_json::Value = resp.json().await.unwrap();
        assert_eq!(body["error"], "IdempotencyKeyMismatch", "{body}");
    }
    let (_, bytes) = get_bytes(&c, &url).await;
    assert_eq!(bytes, b"once");
}

/// Review round 15, N4: a multipart completion refused for now (503 CommitInProgress: another
/// instance is committing the same key) keeps its upload, so the retry the answer asks for
/// completes it. Through the S3 API, unsigned (the cluster runs in development mode).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_completion_refused_for_now_keeps_its_upload() {
    let _serial = SERIAL.lock().await;
    let cluster = Cluster::up(1, "ministack");
    let c = client();
    let (s, _) = put(&c, &cluster.object(1, "mpu"), Some("5"), b"v0").await;
    assert_eq!(s, 200, "{}", cluster.logs());
    let (proxy, other) = instance_behind_proxy(&cluster, "other").await;
    let s3 = cluster.url(1, "/default/mpu");
    let created = c
        .post(format!("{s3}?uploads"))
        .header("Fencing-Token", "7")
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let upload = created
        .split("<UploadId>")
        .nth(1)
        .and_then(|r| r.split("</UploadId>").next())
        .unwrap_or_else(|| panic!("no UploadId in {created}"))
        .to_string();
    let part = c
        .put(format!("{s3}?partNumber=1&uploadId={upload}"))
        .header("Fencing-Token", "7")
        .body("the only part")
        .send()
        .await
        .unwrap();
    assert_eq!(part.status(), 200);
    let etag = part.headers()["etag"].to_str().unwrap().to_string();
    let complete = || {
        c.post(format!("{s3}?uploadId={upload}"))
            .header("Fencing-Token", "7")
            .body(format!(
                "<CompleteMultipartUpload><Part><PartNumber>1</PartNumber><ETag>{etag}</ETag></Part></CompleteMultipartUpload>"
            ))
            .send()
    };
    // Another instance's commit of the key is held on its way to the store.
    proxy.set(Mode::HoldConditionalWrites);
    let held = {
        let (c, url) = (c.clone(), other.object_url("default", "mpu"));
        tokio::spawn(async move { put(&c, &url, Some("6"), b"other-6").await })
    };
    while proxy.held() == 0 {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let refused = complete().await.unwrap();
    assert_eq!(refused.status(), 503);
    assert!(refused.text().await.unwrap().contains("CommitInProgress"));
    proxy.release();
    assert_eq!(held.await.unwrap().0, 200);
    let done = complete().await.unwrap();
    assert_eq!(
        done.status(),
        200,
        "the retry completes the upload: {}",
        done.text().await.unwrap()
    );
    let (_, bytes) = get_bytes(&c, &cluster.object(1, "mpu")).await;
    assert_eq!(bytes, b"the only part");
    // Completed again (its answer lost, say): answered as the first completion was.
    let again = complete().await.unwrap();
    assert_eq!(again.status(), 200);
    assert_eq!(again.headers()["idempotent-replayed"], "true");
}

/// An instance whose commit is paused between its intent and the store (here: its store
/// request held by a proxy, and the instance itself SIGSTOPped past every timeout) wakes after
/// a newer token's write was acknowledged through another instance. Returns what the object
/// holds then (bytes, token) and the paused instance's answer. `mode` is how the proxy holds
/// the request: as sent, or (the negative control) stripping its conditions and its presigned
/// expiry, as a store that ignores both would. `newer` is the newer holder's body.
async fn paused_commit(mode: Mode, newer: &'static [u8]) -> (Vec<u8>, Option<u64>, u16, Cluster) {
    let _serial = SERIAL.lock().await;
    let cluster = Cluster::up(1, "ministack");
    let c = client();
    let (s, _) = put(&c, &cluster.object(1, "p"), Some("1"), b"first").await;
    assert_eq!(s, 200, "{}", cluster.logs());
    // A second instance whose store requests go through a proxy that can hold them.
    let (proxy, paused) = instance_behind_proxy(&cluster, "paused").await;
    proxy.set(mode);
    let zombie = {
        let (c, url) = (c.clone(), paused.object_url("default", "p"));
        tokio::spawn(async move { put(&c, &url, Some("2"), b"zombie").await })
    };
    let started = Instant::now();
    while proxy.held() == 0 {
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "the paused instance never reached the store"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    // Paused past every timeout of its own (etcd's 2 s, the request's deadline).
    unsafe { libc::kill(paused.pid() as i32, libc::SIGSTOP) };
    // The newer holder's write waits (503 CommitInProgress, retried as a client would) until
    // the paused commit's deadline has passed (intent_ttl_secs = 3, plus the skew).
    let (s, body, waited) =
        super::put_past_commit_in_progress(&c, &cluster.object(1, "p"), "3", newer).await;
    assert_eq!(s, 200, "the newer holder's write: {body}");
    assert!(
        waited >= Duration::from_millis(2500),
        "the newer write did not wait for the paused commit's deadline"
    );
    // The held request goes on to the store while the instance still sleeps (as a request in
    // the network would), then the instance wakes: had it woken first, its wait for the answer,
    // long over, would drop the request before the proxy let it go.
    proxy.release();
    tokio::time::sleep(Duration::from_secs(1)).await;
    unsafe { libc::kill(paused.pid() as i32, libc::SIGCONT) };
    let (zombie_status, _) = zombie.await.unwrap();
    let (_, bytes) = get_bytes(&c, &cluster.object(1, "p")).await;
    let token = token_of(&c, &cluster.object(1, "p")).await;
    (bytes, token, zombie_status, cluster)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_instance_does_not_land_over_a_newer_acknowledged_write() {
    let (bytes, token, zombie, cluster) =
        paused_commit(Mode::HoldConditionalWrites, b"newer").await;
    assert_eq!(
        (String::from_utf8_lossy(&bytes).as_ref(), token),
        ("newer", Some(3)),
        "{}",
        cluster.logs()
    );
    // The store refuses the held request as expired. The paused instance answers 409 if it
    // hears that refusal (and, taking its decision again, finds the newer token), or 504 if
    // its own wait for the answer, bounded by the deadline, ran out first; never 200.
    assert!(
        zombie == 409 || zombie == 504,
        "the paused instance's write is refused when it wakes: {zombie}"
    );
}

/// The negative control: with a store that ignores the condition, the same scenario lets the
/// zombie's write land after the newer acknowledged one, and the same check sees it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn negative_control_a_store_without_conditions_lets_the_paused_write_land() {
    let (bytes, token, _, _cluster) = paused_commit(Mode::HoldAndDropConditions, b"newer").await;
    assert_eq!(
        (String::from_utf8_lossy(&bytes).as_ref(), token),
        ("zombie", Some(2)),
        "without the store's condition the stale write lands: the check above would catch it"
    );
}

/// What was the known limit of round one (docs/design.md, "Bounded intents"): S3 ETags are
/// content hashes, so when the newer holder writes exactly the bytes the paused commit's
/// condition expects, the condition matches again (an ABA). The newer write now waits for the
/// paused commit's deadline, after which the store refuses the paused request as expired: the
/// stale write never lands, and the next write is not mistaken for a bypass.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn identical_bytes_under_a_newer_token_do_not_let_the_paused_write_land() {
    let (bytes, token, zombie, cluster) =
        paused_commit(Mode::HoldConditionalWrites, b"first").await;
    assert_eq!(
        (String::from_utf8_lossy(&bytes).as_ref(), token),
        ("first", Some(3)),
        "{}",
        cluster.logs()
    );
    assert!(zombie == 409 || zombie == 504, "{zombie}");
    let c = client();
    let (s, body) = put(&c, &cluster.object(1, "p"), Some("4"), b"after").await;
    assert_eq!(s, 200, "{body}");
}

/// Cluster mode's start-up probe (review round 13, N2): the deadlines are judged by each
/// instance's clock and by the store's, so an instance whose clock runs ahead of the store's by
/// more than `max_clock_skew_ms`, or behind it by `intent_ttl_secs`, refuses to start and says
/// which. (The store honouring expiry is probed at every start; this cluster's instances pass.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_instance_whose_clock_disagrees_with_the_store_refuses_to_start() {
    let _serial = SERIAL.lock().await;
    let cluster = Cluster::up(1, "ministack");
    let dir = cluster.dir.path().join("skewed");
    std::fs::create_dir_all(&dir).unwrap();
    let config = dir.join("fencegate.toml");
    std::fs::write(
        &config,
        format!(
            "[server]\nlisten = \"127.0.0.1:0\"\ndata_dir = \"{}\"\n{}\n[backends.store]\nkind = \"s3\"\nendpoint = \"{}\"\nregion = \"us-east-1\"\naccess_key_id = \"test\"\nsecret_access_key = \"test\"\n\n[buckets.default]\nbackend = \"store\"\nbackend_bucket = \"fencegate-cluster\"\n",
            dir.display(),
            cluster.fence_store_toml(),
            cluster.store_endpoint()
        ),
    )
    .unwrap();
    for (offset, says) in [
        (
            "+5s",
            "ahead of the store's, more than max_clock_skew_ms = 500",
        ),
        ("-5s", "behind the store's, as long as intent_ttl_secs = 3"),
    ] {
        let out = std::process::Command::new("faketime")
            .env("FAKETIME_DONT_FAKE_MONOTONIC", "1")
            .args(["-f", offset])
            .arg(binary())
            .args(["serve", "--config"])
            .arg(&config)
            .output()
            .expect("faketime (Debian package faketime; scripts/test installs it)");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            !out.status.success(),
            "started with the clock {offset}: {stderr}"
        );
        assert!(stderr.contains(says), "clock {offset}: {stderr}");
    }
}
