//! The fence table on a real etcd (`[fence_store] kind = "etcd"`, `fence/etcd.rs`): rows round
//! trip with their revision, a put is a compare-and-swap on the revisions its rows were read at
//! (all rows or none), prefixes keep deployments apart, scans page through large tables, and
//! an unreachable etcd is an error within the deadline, never a hang.

use crate::common;
use common::etcd::Etcd;
use fencegate::fence::etcd::{EtcdFenceStore, EtcdSettings};
use fencegate::fence::{Durability, FenceRow, FenceStore, StoreError};
use std::time::{Duration, Instant};

fn settings(endpoint: &str, prefix: &str) -> EtcdSettings {
    EtcdSettings {
        endpoints: vec![endpoint.to_string()],
        prefix: prefix.to_string(),
        user: None,
        ca_file: None,
        identity: None,
        timeout: Duration::from_secs(2),
    }
}

fn row(highest: u64) -> FenceRow {
    FenceRow {
        highest: Some(highest),
        ..FenceRow::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rows_are_compare_and_swapped_on_their_revision() {
    let dir = tempfile::tempdir().unwrap();
    let etcd = Etcd::start(&dir.path().join("etcd"));
    let a = EtcdFenceStore::connect(&settings(&etcd.endpoint, "fg/"))
        .await
        .unwrap();
    let b = EtcdFenceStore::connect(&settings(&etcd.endpoint, "fg/"))
        .await
        .unwrap();
    assert!(a.shared());

    // Created only if still absent when read as absent (rev 0).
    assert_eq!(a.get("object:b/k").await.unwrap(), None);
    let rev = a
        .put(vec![("object:b/k".into(), row(5))], Durability::Synced)
        .await
        .unwrap();
    assert!(rev > 0);
    let e = b
        .put(vec![("object:b/k".into(), row(4))], Durability::Synced)
        .await
        .unwrap_err();
    assert!(matches!(e, StoreError::Conflict(_)), "{e}");

    // Read by another instance: the same row, at the revision of the put.
    let seen = b.get("object:b/k").await.unwrap().unwrap();
    assert_eq!((seen.highest, seen.rev), (Some(5), rev));

    // A changes it; B's put at the old revision fails and writes nothing, in either row.
    let mut mine = a.get("object:b/k").await.unwrap().unwrap();
    mine.highest = Some(6);
    a.put(vec![("object:b/k".into(), mine)], Durability::Synced)
        .await
        .unwrap();
    let stale = FenceRow {
        highest: Some(7),
        ..seen
    };
    let e = b
        .put(
            vec![("scope:b".into(), row(7)), ("object:b/k".into(), stale)],
            Durability::Lazy,
        )
        .await
        .unwrap_err();
    assert!(matches!(e, StoreError::Conflict(_)));
    assert_eq!(b.get("scope:b").await.unwrap(), None, "all rows or none");
    assert_eq!(b.get("object:b/k").await.unwrap().unwrap().highest, Some(6));

    // Read again, decided again: it goes through.
    let fresh = b.get("object:b/k").await.unwrap().unwrap();
    let rev2 = b
        .put(
            vec![(
                "object:b/k".into(),
                FenceRow {
                    highest: Some(7),
                    ..fresh
                },
            )],
            Durability::Synced,
        )
        .await
        .unwrap();
    // The revision a put returns is the one the next put of the same row must carry.
    let next = FenceRow {
        highest: Some(8),
        rev: rev2,
        ..row(0)
    };
    b.put(vec![("object:b/k".into(), next)], Durability::Synced)
        .await
        .unwrap();
    assert_eq!(a.get("object:b/k").await.unwrap().unwrap().highest, Some(8));

    // Another prefix is another table.
    let other = EtcdFenceStore::connect(&settings(&etcd.endpoint, "other/"))
        .await
        .unwrap();
    assert_eq!(other.get("object:b/k").await.unwrap(), None);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scans_page_through_a_prefix_in_key_order() {
    let dir = tempfile::tempdir().unwrap();
    let etcd = Etcd::start(&dir.path().join("etcd"));
    let store = std::sync::Arc::new(
        EtcdFenceStore::connect(&settings(&etcd.endpoint, "fg/"))
            .await
            .unwrap(),
    );
    for chunk in (0..1200u64).collect::<Vec<_>>().chunks(100) {
        let rows = chunk
            .iter()
            .map(|i| (format!("object:b/{i:05}"), row(*i)))
            .collect();
        store.put(rows, Durability::Synced).await.unwrap();
    }
    store
        .put(vec![("object:c/x".into(), row(1))], Durability::Synced)
        .await
        .unwrap();
    let scanner = store.clone();
    let keys = tokio::task::spawn_blocking(move || {
        let mut keys = Vec::new();
        scanner
            .scan_prefix("object:b/", &mut |k, r| {
                assert_eq!(r.highest, k[9..].parse().ok());
                keys.push(k.to_string());
                true
            })
            .unwrap();
        keys
    })
    .await
    .unwrap();
    assert_eq!(
        keys.len(),
        1200,
        "every page, and nothing of the next prefix"
    );
    assert!(keys.windows(2).all(|w| w[0] < w[1]));
    // A visitor that stops early stops the scan.
    let scanner = store.clone();
    let seen = tokio::task::spawn_blocking(move || {
        let mut n = 0;
        scanner
            .scan_prefix("object:b/", &mut |_, _| {
                n += 1;
                n < 3
            })
            .unwrap();
        n
    })
    .await
    .unwrap();
    assert_eq!(seen, 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreachable_etcd_is_an_error_within_the_deadline() {
    let port = common::moto::free_port();
    let started = Instant::now();
    let e = EtcdFenceStore::connect(&settings(&format!("http://127.0.0.1:{port}"), "fg/"))
        .await
        .err()
        .expect("nothing listens there");
    assert!(
        started.elapsed() < Duration::from_secs(8),
        "took {:?}",
        started.elapsed()
    );
    assert!(e.to_string().contains("etcd"), "{e}");

    // A store whose etcd dies: calls fail within the deadline.
    let dir = tempfile::tempdir().unwrap();
    let mut etcd = Etcd::start(&dir.path().join("etcd"));
    let store = EtcdFenceStore::connect(&settings(&etcd.endpoint, "fg/"))
        .await
        .unwrap();
    etcd.stop();
    let started = Instant::now();
    assert!(store.get("object:b/k").await.is_err());
    assert!(store
        .put(vec![("object:b/k".into(), row(1))], Durability::Synced)
        .await
        .is_err());
    assert!(
        started.elapsed() < Duration::from_secs(8),
        "took {:?}",
        started.elapsed()
    );
}

/// Group commit (`fence/etcd_batch.rs`): puts made at once share Txns (fewer revisions than
/// puts), and each still gets its own answer. Of two puts of one row, the one at the row's
/// revision applies and the one that read it as absent fails alone, writing nothing, while
/// the other puts of its batch apply.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn puts_made_at_once_share_txns_and_each_gets_its_own_answer() {
    let dir = tempfile::tempdir().unwrap();
    let etcd = Etcd::start(&dir.path().join("etcd"));
    let store = EtcdFenceStore::connect(&settings(&etcd.endpoint, "fg/"))
        .await
        .unwrap();
    let key = |i: usize| format!("object:b/k{i}");
    let created = futures::future::join_all(
        (0..100).map(|i| store.put(vec![(key(i), row(1))], Durability::Synced)),
    )
    .await;
    let revs: Vec<i64> = created.into_iter().map(Result::unwrap).collect();
    let distinct: std::collections::BTreeSet<_> = revs.iter().collect();
    assert!(
        distinct.len() < 50,
        "100 puts made at once took {} Txns",
        distinct.len()
    );
    let puts = (0..20).flat_map(|i| {
        let fresh = FenceRow {
            rev: revs[i],
            ..row(2)
        };
        // Read as absent (rev 0), but the row exists: this one must fail, alone.
        let stale = row(3);
        [
            store.put(vec![(key(i), fresh)], Durability::Synced),
            store.put(
                vec![(key(i), stale), (key(50 + i), row(9))],
                Durability::Synced,
            ),
        ]
    });
    let answers = futures::future::join_all(puts).await;
    for (n, answer) in answers.iter().enumerate() {
        match (n % 2, answer) {
            (0, Ok(_)) => {}
            (1, Err(StoreError::Conflict(_))) => {}
            _ => panic!("put {n}: {answer:?}"),
        }
    }
    for i in 0..20 {
        let row = store.get(&key(i)).await.unwrap().unwrap();
        assert_eq!(row.highest, Some(2), "row {i}");
        let other = store.get(&key(50 + i)).await.unwrap().unwrap();
        assert_eq!(other.highest, Some(1), "a failed put wrote row {}", 50 + i);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fold_is_conditional_and_creates_guarded_by_the_floor_see_it() {
    let dir = tempfile::tempdir().unwrap();
    let etcd = Etcd::start(&dir.path().join("etcd"));
    let store = EtcdFenceStore::connect(&settings(&etcd.endpoint, "fg/"))
        .await
        .unwrap();
    let tombstone = FenceRow {
        tombstone: true,
        ..row(7)
    };
    let rev = store
        .put(vec![("object:b/k".into(), tombstone)], Durability::Synced)
        .await
        .unwrap();
    // Folded at a revision the row has left: refused, nothing written.
    let e = store
        .fold(
            Some(("floor:b".into(), row(7))),
            vec![("object:b/k".into(), rev - 1)],
        )
        .await
        .unwrap_err();
    assert!(matches!(e, StoreError::Conflict(_)), "{e}");
    assert_eq!(store.get("floor:b").await.unwrap(), None);
    // At its revision: the floor written and the row gone, in one Txn.
    let folded = store
        .fold(
            Some(("floor:b".into(), row(7))),
            vec![("object:b/k".into(), rev)],
        )
        .await
        .unwrap();
    assert_eq!(store.get("object:b/k").await.unwrap(), None);
    let floor = store.get("floor:b").await.unwrap().unwrap();
    assert_eq!((floor.highest, floor.rev), (Some(7), folded));
    // A create judged against the floor as it was before (absent) is refused; against the
    // floor as it is, it goes through.
    let judged_before = FenceRow {
        floor_guard: Some(("floor:b".into(), 0)),
        ..row(5)
    };
    let e = store
        .put(
            vec![("object:b/k".into(), judged_before)],
            Durability::Synced,
        )
        .await
        .unwrap_err();
    assert!(matches!(e, StoreError::Conflict(_)), "{e}");
    assert_eq!(store.get("object:b/k").await.unwrap(), None);
    let judged_now = FenceRow {
        floor_guard: Some(("floor:b".into(), folded)),
        ..row(7)
    };
    store
        .put(vec![("object:b/k".into(), judged_now)], Durability::Synced)
        .await
        .unwrap();
    assert_eq!(
        store.get("object:b/k").await.unwrap().unwrap().highest,
        Some(7)
    );
}
