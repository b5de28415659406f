//! Tombstones folded into the bucket's floor on a shared (etcd) table: the deletes and the fold
//! on one instance and stale writes through the other, during the fold and after it; and a
//! restarted instance counts the tombstones already there.

use super::SERIAL;
use crate::common;
use common::cluster::Cluster;
use std::time::Duration;

async fn put(c: &reqwest::Client, url: String, token: u64) -> u16 {
    c.put(url)
        .header("Fencing-Token", token.to_string())
        .body("zombie")
        .send()
        .await
        .unwrap()
        .status()
        .as_u16()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stale_writes_through_another_instance_never_land_around_a_fold() {
    let _serial = SERIAL.lock().await;
    let cluster = Cluster::up(2, "ministack");
    for n in ["fg1", "fg2"] {
        let file = cluster.dir.path().join(format!("{n}.toml"));
        let text = std::fs::read_to_string(&file)
            .unwrap()
            .replace("[server]\n", "[server]\nmax_tombstones_per_bucket = 8\n");
        std::fs::write(&file, text).unwrap();
        cluster.signal(n, "TERM");
        cluster.start(n);
    }
    let c = common::client();
    // Seven tombstones through fg1, tokens 100..106 (below the bound: nothing folds yet).
    for i in 0..7u64 {
        let resp = c
            .delete(cluster.object(1, &format!("k{i}")))
            .header("Fencing-Token", (100 + i).to_string())
            .send()
            .await
            .unwrap();
        assert!(resp.status().is_success(), "{}", cluster.logs());
    }
    // The eighth starts the fold on fg1; at once, fg2 is hammered with writes one below each
    // key's tombstone (all deletes acknowledged before any of them is sent).
    let resp = c
        .delete(cluster.object(1, "k7"))
        .header("Fencing-Token", "107")
        .send()
        .await
        .unwrap();
    assert!(resp.status().is_success());
    let mut landed = Vec::new();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(8);
    let mut rounds = 0;
    while tokio::time::Instant::now() < deadline {
        rounds += 1;
        let writes: Vec<_> = (0..8u64)
            .map(|i| {
                let (c, url) = (c.clone(), cluster.object(2, &format!("k{i}")));
                tokio::spawn(async move { (i, put(&c, url, 99 + i).await) })
            })
            .collect();
        for w in writes {
            let (i, status) = w.await.unwrap();
            if status != 409 {
                landed.push(format!(
                    "round {rounds}: k{i} with {} answered {status}",
                    99 + i
                ));
            }
        }
        let floor: serde_json::Value = c
            .get(cluster.url(2, "/v1/fences/default/never-written"))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        if floor["highest"] == 107 && rounds > 3 {
            break;
        }
    }
    assert!(
        landed.is_empty(),
        "{}\n{}",
        landed.join("\n"),
        cluster.logs()
    );
    // Folded: a key never written is judged by the floor, through either instance.
    let floor: serde_json::Value = c
        .get(cluster.url(2, "/v1/fences/default/never-written"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(floor["highest"], 107, "the fold did not happen: {floor}");
    for n in [1, 2] {
        assert_eq!(put(&c, cluster.object(n, "k7"), 106).await, 409);
        assert_eq!(put(&c, cluster.object(n, "fresh"), 106).await, 409);
    }
    assert_eq!(put(&c, cluster.object(2, "k0"), 107).await, 200);
}

// Counts live in memory: a restart (a rolling deploy, a crash) would forget them, and every
// restart let one instance add up to the bound again, without end. So each start counts the
// shared table's tombstones too: 7 deletes, a restart, 7 more, with the bound at 8, fold.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restarted_instance_does_not_forget_the_tombstones_it_counted() {
    let _serial = SERIAL.lock().await;
    let cluster = Cluster::up(2, "ministack");
    for n in ["fg1", "fg2"] {
        let file = cluster.dir.path().join(format!("{n}.toml"));
        let text = std::fs::read_to_string(&file)
            .unwrap()
            .replace("[server]\n", "[server]\nmax_tombstones_per_bucket = 8\n");
        std::fs::write(&file, text).unwrap();
        cluster.signal(n, "TERM");
        cluster.start(n);
    }
    let c = common::client();
    let mut token = 100u64;
    for round in 0..2 {
        for i in 0..7 {
            token += 1;
            let resp = c
                .delete(cluster.object(1, &format!("r{round}-{i}")))
                .header("Fencing-Token", token.to_string())
                .send()
                .await
                .unwrap();
            assert!(resp.status().is_success(), "{}", cluster.logs());
        }
        if round == 0 {
            cluster.signal("fg1", "KILL");
            cluster.start("fg1");
        }
    }
    // 14 tombstones through one instance, bound 8: a fold must have begun by now.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    let floor = loop {
        let floor: serde_json::Value = c
            .get(cluster.url(2, "/v1/fences/default/never-written"))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        if !floor["highest"].is_null() || tokio::time::Instant::now() > deadline {
            break floor;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    assert!(
        !floor["highest"].is_null(),
        "14 tombstones through one instance (bound 8, one restart between) and no fold: {floor}"
    );
}
