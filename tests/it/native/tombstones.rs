//! What deletes of absent keys leave behind is bounded (`[server] max_tombstones_per_bucket`):
//! a key allowed only to delete sends hundreds of them, the fence table keeps at most the bound
//! in tombstones (counted by the census of a restarted instance), and the folded tokens are
//! still enforced, with a message that says where the highest token came from.

use crate::common;
use common::sign::{send, Creds};
use common::Server;

const CONFIG: &str = r#"
[server]
max_tombstones_per_bucket = 50

[keys.deleter]
access_key_id = "deleter-key"
secret_access_key = "deleter-secret-0123456"
buckets = { "default" = ["delete"] }

[keys.worker]
access_key_id = "worker-key"
secret_access_key = "worker-secret-0123456"
buckets = { "default" = ["read", "write"] }

[keys.ops]
access_key_id = "ops-key"
secret_access_key = "ops-secret-0123456"
admin = true
"#;

const DELETER: Creds = Creds {
    key: "deleter-key",
    secret: "deleter-secret-0123456",
};
const WORKER: Creds = Creds {
    key: "worker-key",
    secret: "worker-secret-0123456",
};
const OPS: Creds = Creds {
    key: "ops-key",
    secret: "ops-secret-0123456",
};

/// A sample of the metrics page (the first line whose name and labels start with `name`).
async fn metric(c: &reqwest::Client, s: &Server, name: &str) -> Option<f64> {
    let text = send(c, c.get(s.url("/metrics")), Some(OPS))
        .await
        .text()
        .await
        .unwrap();
    text.lines()
        .find(|l| l.starts_with(name))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deletes_of_absent_keys_leave_at_most_the_bound_and_their_tokens_hold() {
    let dir = tempfile::tempdir().unwrap();
    let c = common::client();
    let deletes = 400u64;
    {
        let s = Server::start(dir.path(), Some(CONFIG));
        for i in 0..deletes {
            let req = c
                .delete(s.object_url("default", &format!("absent/{i}")))
                .header("Fencing-Token", (1000 + i).to_string());
            let status = send(&c, req, Some(DELETER)).await.status().as_u16();
            assert_eq!(status, 200, "delete {i}");
        }
        // Folded in the background, past each 50 deletes.
        let folded_metric = "fencegate_tombstones_folded_total{bucket=\"default\"}";
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
        loop {
            let folded = metric(&c, &s, folded_metric).await.unwrap_or(0.0);
            if folded >= (deletes - 50) as f64 {
                println!("{folded} of {deletes} tombstones folded");
                break;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "only {folded} of {deletes} tombstones folded"
            );
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        }
    }
    // A new process counts the table's rows at start-up: at most the bound are tombstones.
    let s = Server::start(dir.path(), Some(CONFIG));
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    let tombstones = loop {
        if let Some(n) = metric(&c, &s, "fencegate_fence_table_tombstones ").await {
            break n;
        }
        assert!(std::time::Instant::now() < deadline, "no census");
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    };
    println!("{tombstones} tombstones kept after {deletes} deletes of absent keys (bound 50)");
    assert!(tombstones <= 50.0, "{tombstones} tombstones kept");

    // Every token a delete recorded is still enforced: below the highest, refused, on a
    // folded key and on a key never named.
    let top = 1000 + deletes - 1;
    for key in ["absent/0", "absent/200", "never-named"] {
        let (status, body) = common::put_as(
            &c,
            &s.object_url("default", key),
            Some(&(top - 1).to_string()),
            b"zombie",
            Some(WORKER),
        )
        .await;
        assert_eq!(status, 409, "{key}: {body}");
        assert_eq!(body["error"], "StaleFencingToken", "{body}");
        let message = body["message"].as_str().unwrap();
        assert!(message.contains("max_tombstones_per_bucket"), "{message}");
    }
    let (status, body) = common::put_as(
        &c,
        &s.object_url("default", "absent/0"),
        Some(&top.to_string()),
        b"the holder",
        Some(WORKER),
    )
    .await;
    assert_eq!(status, 200, "{body}");
}
